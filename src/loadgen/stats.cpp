#include "loadgen/stats.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace mnemo::loadgen {

double percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const double rank = std::clamp(p, 0.0, 100.0) / 100.0 * static_cast<double>(values.size() - 1);
  const auto below = static_cast<size_t>(std::floor(rank));
  const size_t above = std::min(below + 1, values.size() - 1);
  const double fraction = rank - static_cast<double>(below);
  return values[below] + fraction * (values[above] - values[below]);
}

Distribution distribution_of(const std::vector<double>& values) {
  Distribution d;
  d.count = static_cast<int64_t>(values.size());
  if (values.empty()) return d;
  d.mean = std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(values.size());
  d.p50 = percentile(values, 50.0);
  d.p90 = percentile(values, 90.0);
  d.p99 = percentile(values, 99.0);
  return d;
}

namespace {

bool within(double value, double bound) { return bound <= 0.0 || value <= bound; }

bool meets_slo(const RequestRecord& r, const Slo& slo) {
  return r.ok && within(r.ttft(), slo.ttft_s) && (!r.has_tpot() || within(r.tpot(), slo.tpot_s));
}

}  // namespace

GroupSummary summarize_group(const std::vector<const RequestRecord*>& records) {
  GroupSummary g;
  std::vector<double> ttft;
  std::vector<double> tpot;
  std::vector<double> e2e;
  for (const RequestRecord* r : records) {
    if (!r->ok) continue;
    ++g.requests;
    ttft.push_back(r->ttft());
    e2e.push_back(r->e2e());
    if (r->has_tpot()) tpot.push_back(r->tpot());
    g.prompt_tokens += std::max(0, r->prompt_tokens);
    g.cached_tokens += std::max(0, r->cached_tokens);
  }
  g.ttft = distribution_of(ttft);
  g.tpot = distribution_of(tpot);
  g.e2e = distribution_of(e2e);
  g.cached_share = g.prompt_tokens > 0 ? static_cast<double>(g.cached_tokens) / static_cast<double>(g.prompt_tokens) : 0.0;
  return g;
}

RunSummary summarize_run(const std::vector<RequestRecord>& records, int64_t turns_planned, const Slo& slo) {
  RunSummary s;
  s.slo = slo;
  s.turns_planned = turns_planned;
  s.requests_sent = static_cast<int64_t>(records.size());
  std::vector<const RequestRecord*> all;
  std::vector<const RequestRecord*> first;
  std::vector<const RequestRecord*> later;
  for (const RequestRecord& r : records) {
    if (r.turn == 0) ++s.conversations;
    s.window_s = std::max(s.window_s, r.finished_s);
    s.max_client_queue_s = std::max(s.max_client_queue_s, r.sent_s - r.scheduled_s);
    if (!r.ok) {
      ++s.requests_failed;
      continue;
    }
    ++s.requests_ok;
    s.output_tokens += std::max(0, r.completion_tokens);
    if (meets_slo(r, slo)) ++s.requests_meeting_slo;
    all.push_back(&r);
    (r.turn == 0 ? first : later).push_back(&r);
  }
  s.all = summarize_group(all);
  s.first_turns = summarize_group(first);
  s.later_turns = summarize_group(later);
  if (s.window_s > 0.0) {
    s.request_throughput = static_cast<double>(s.requests_ok) / s.window_s;
    s.output_throughput = static_cast<double>(s.output_tokens) / s.window_s;
    s.goodput = static_cast<double>(s.requests_meeting_slo) / s.window_s;
  }
  s.slo_met = s.requests_failed == 0 && s.requests_sent == turns_planned && s.requests_ok > 0 &&
              within(s.all.ttft.p90, slo.ttft_s) && within(s.all.tpot.p90, slo.tpot_s);
  return s;
}

}  // namespace mnemo::loadgen

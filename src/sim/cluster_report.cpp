#include "sim/cluster_report.h"

#include <fmt/format.h>

namespace mnemo::sim {
namespace {

double ratio(int64_t a, int64_t b) { return b == 0 ? 0.0 : static_cast<double>(a) / static_cast<double>(b); }

}  // namespace

std::string format_cluster_table(const std::vector<ClusterOutcome>& outcomes) {
  std::string out = fmt::format("{:>9}  {:<13} {:>6} {:>9} {:>12} {:>9} {:>10} {:>9} {:>9} {:>9} {:>9} {:>8} {:>8}\n",
                                "instances", "routing", "hit %", "of reuse", "recomputed", "transfers", "moved MiB",
                                "TTFT avg", "p50", "p90", "p99", "busiest", "replay s");
  for (const ClusterOutcome& o : outcomes) {
    out += fmt::format("{:>9}  {:<13} {:>6.1f} {:>8.1f}% {:>12} {:>9} {:>10.1f} {:>9.3f} {:>9.3f} {:>9.3f} {:>9.3f} {:>7.1f}% {:>8.1f}\n",
                       o.instances, o.routing, 100.0 * ratio(o.hit_tokens_total(), o.prompt_tokens),
                       100.0 * ratio(o.hit_tokens_total(), o.reusable_tokens), o.recomputed_tokens, o.transfers,
                       static_cast<double>(o.transfer_bytes) / (1 << 20), o.ttft_mean_s, o.ttft_p50_s, o.ttft_p90_s,
                       o.ttft_p99_s, 100.0 * ratio(o.busiest_instance_requests, o.requests), o.replay_seconds);
  }
  return out + "(tokens; hit % of prompt tokens; of reuse: hits / what one unbounded cache would serve; TTFT in "
               "seconds, estimated from the cost model; busiest: one instance's share of the requests)\n";
}

nlohmann::json cluster_outcomes_json(const std::vector<ClusterOutcome>& outcomes) {
  nlohmann::json out = nlohmann::json::array();
  for (const ClusterOutcome& o : outcomes) {
    out.push_back({{"instances", o.instances},
                   {"routing", o.routing},
                   {"requests", o.requests},
                   {"prompt_tokens", o.prompt_tokens},
                   {"reusable_tokens", o.reusable_tokens},
                   {"hit_tokens", {{"device", o.hit_tokens[0]}, {"host", o.hit_tokens[1]}, {"disk", o.hit_tokens[2]}}},
                   {"hit_rate", ratio(o.hit_tokens_total(), o.prompt_tokens)},
                   {"recomputed_tokens", o.recomputed_tokens},
                   {"transfers", o.transfers},
                   {"transfer_bytes", o.transfer_bytes},
                   {"ttft_s", {{"mean", o.ttft_mean_s}, {"p50", o.ttft_p50_s}, {"p90", o.ttft_p90_s}, {"p99", o.ttft_p99_s}}},
                   {"wait_mean_s", o.wait_mean_s},
                   {"busiest_instance_requests", o.busiest_instance_requests},
                   {"device_overcommits", o.device_overcommits},
                   {"replay_seconds", o.replay_seconds}});
  }
  return out;
}

}  // namespace mnemo::sim

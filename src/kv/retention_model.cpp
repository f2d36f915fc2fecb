#include "kv/retention_model.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "util/check.h"

namespace mnemo {
namespace {

// ln(1 + e^x) without overflow.
double softplus(double x) { return x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x)); }

// ln P(alive) from ln S: P = p S / (p S + 1 - p), the logistic of ln(p / (1 - p)) + ln S.
double log_alive(double p, double log_s) { return -softplus(-(std::log(p) - std::log1p(-p) + log_s)); }

// Censored observations of weight `weight` at an idle time by which a conversation that comes
// back would have come back with probability `back` (1 - S).
struct Censored {
  double weight;
  double back;
};

// ln of the likelihood of a class's observations as a function of its p alone (the think times
// fixed, their factors left out): ln p per returned conversation, ln(1 - p + p S) per censored one.
double log_likelihood(double p, double returned, const std::vector<Censored>& censored) {
  double l = returned > 0 ? returned * std::log(p) : 0;
  for (const Censored& x : censored) l += x.weight * std::log1p(-p * x.back);
  return l;
}

// 2 ln of the likelihood ratio of the best p for these observations against `pooled`: about
// chi-square with one degree of freedom if the class comes back like the pooled traffic. The
// log-likelihood is concave in p, so its maximum is where the score changes sign: bisection.
double split_statistic(double pooled, double returned, const std::vector<Censored>& censored) {
  double lo = 0;
  double hi = 1;
  for (int i = 0; i < 48; ++i) {
    const double p = (lo + hi) / 2;
    double score = returned / p;
    for (const Censored& x : censored) score -= x.weight * x.back / (1 - p * x.back);
    (score > 0 ? lo : hi) = p;
  }
  const double best = (lo + hi) / 2;
  return 2 * std::max(0.0, log_likelihood(best, returned, censored) - log_likelihood(pooled, returned, censored));
}

}  // namespace

RetentionModel::RetentionModel(RetentionOptions options) : o_(options) {
  MNEMO_CHECK(o_.first_edge_s > 0 && o_.bins_per_octave > 0 && o_.idle_bins >= 2, "bad idle-time bins");
  MNEMO_CHECK(o_.class_bins_per_octave > 0 && o_.classes >= 1, "bad classes");
  MNEMO_CHECK(o_.prior_return_probability > 0 && o_.prior_return_probability < 1,
              "the prior return probability must be in (0, 1), got {}", o_.prior_return_probability);
  MNEMO_CHECK(o_.prior_conversations > 0 && o_.class_prior_conversations > 0 && o_.prior_hazard_conversations > 0 &&
                  o_.neighbour_weight >= 0,
              "prior weights must be positive");
  MNEMO_CHECK(o_.class_split_statistic >= 0, "the class split statistic must be non-negative, got {}",
              o_.class_split_statistic);
  MNEMO_CHECK(o_.prior_think_s > 0 && o_.refresh_interval_s >= 0 && o_.em_steps >= 1 && o_.pending_horizon_s > 0,
              "bad fit options");
  const auto bins = static_cast<size_t>(o_.idle_bins);
  starts_.resize(bins);
  widths_.resize(bins);
  starts_[0] = 0;
  for (size_t k = 1; k < bins; ++k) starts_[k] = o_.first_edge_s * std::exp2(static_cast<double>(k - 1) / o_.bins_per_octave);
  for (size_t k = 0; k + 1 < bins; ++k) widths_[k] = starts_[k + 1] - starts_[k];
  widths_[bins - 1] = starts_[bins - 1] * (std::exp2(1.0 / o_.bins_per_octave) - 1);

  const size_t cells = static_cast<size_t>(o_.classes) * bins;
  returns_.assign(cells, 0);
  returns_in_bin_.assign(cells, 0);
  drops_.assign(cells, 0);
  drops_in_bin_.assign(cells, 0);
  p_.assign(static_cast<size_t>(o_.classes), o_.prior_return_probability);
  p_pooled_ = o_.prior_return_probability;
  hazard_.assign(bins, 1.0 / o_.prior_think_s);
  log_s_start_.assign(bins, 0);
  log_index_.assign(cells, 0);
  fit(drops_, drops_in_bin_);
  build_index_tables();
}

int32_t RetentionModel::class_of(int32_t end_chunks) const {
  const double bucket = std::floor(std::log2(static_cast<double>(std::max(1, end_chunks))) * o_.class_bins_per_octave);
  return std::min(o_.classes - 1, static_cast<int32_t>(bucket));
}

int32_t RetentionModel::bin_of(double idle_seconds) const {
  if (!(idle_seconds >= o_.first_edge_s)) return 0;  // NaN too
  const double k = 1 + std::floor(std::log2(idle_seconds / o_.first_edge_s) * o_.bins_per_octave);
  auto b = static_cast<int32_t>(std::min<double>(k, o_.idle_bins - 1));
  // log2 may land a hair off a bin start: settle on the bin whose [start, next start) holds it.
  if (idle_seconds < starts_[static_cast<size_t>(b)]) --b;
  if (b + 1 < o_.idle_bins && idle_seconds >= starts_[static_cast<size_t>(b) + 1]) ++b;
  return b;
}

double RetentionModel::weight_of(const ChunkFacts& c) const { return 1.0 / std::max(1, c.end_chunks); }

void RetentionModel::add(std::vector<double>& count, std::vector<double>& in_bin, int32_t cls, double idle, double w) const {
  const int32_t b = bin_of(idle);
  count[slot(cls, b)] += w;
  in_bin[slot(cls, b)] += w * (idle - starts_[static_cast<size_t>(b)]);
}

void RetentionModel::observe_insert(const ChunkFacts& c, double now, int32_t chunks) {
  if (chunks <= 0) return;
  pending_[{c.last_use, class_of(c.end_chunks)}] += weight_of(c) * chunks;
  maybe_refresh(now);
}

void RetentionModel::observe_return(const ChunkFacts& c, double now, int32_t chunks) {
  resolve(c, now, chunks, /*returned=*/true);
}

void RetentionModel::observe_drop(const ChunkFacts& c, double now, int32_t chunks) {
  resolve(c, now, chunks, /*returned=*/false);
}

void RetentionModel::resolve(const ChunkFacts& c, double now, int32_t chunks, bool returned) {
  if (chunks <= 0) return;
  const int32_t cls = class_of(c.end_chunks);
  const double w = weight_of(c) * chunks;
  const double idle = std::max(0.0, now - c.last_use);
  if (returned) {
    add(returns_, returns_in_bin_, cls, idle, w);
  } else {
    add(drops_, drops_in_bin_, cls, idle, w);
  }
  // No longer pending. A chunk never reported idle has nothing to take back; one already
  // censored at the horizon is counted twice, which the horizon makes rare.
  take_pending(cls, c.last_use, w);
  maybe_refresh(now);
}

void RetentionModel::observe_end(const ChunkFacts& c, double now, int32_t chunks) {
  if (chunks <= 0) return;
  take_pending(class_of(c.end_chunks), c.last_use, weight_of(c) * chunks);
  maybe_refresh(now);
}

void RetentionModel::take_pending(int32_t cls, double last_use, double w) {
  const auto it = pending_.find({last_use, cls});
  if (it == pending_.end()) return;
  it->second -= w;
  if (it->second <= 1e-9) pending_.erase(it);
}

void RetentionModel::maybe_refresh(double now) {
  if (!refreshed_ || now - last_refresh_ >= o_.refresh_interval_s) refresh(now);
}

void RetentionModel::refresh(double now) {
  // Chunks idle past the horizon without news are censored there for good (and leave pending_).
  while (!pending_.empty() && now - pending_.begin()->first.first > o_.pending_horizon_s) {
    const auto& [key, w] = *pending_.begin();
    add(drops_, drops_in_bin_, key.second, o_.pending_horizon_s, w);
    pending_.erase(pending_.begin());
  }
  // The rest are censored now, for this fit only.
  std::vector<double> censored = drops_;
  std::vector<double> censored_in_bin = drops_in_bin_;
  for (const auto& [key, w] : pending_) add(censored, censored_in_bin, key.second, std::max(0.0, now - key.first), w);
  fit(censored, censored_in_bin);
  build_index_tables();
  last_refresh_ = now;
  refreshed_ = true;
}

// The EM fit's working figures, per class and idle bin (index class x bins + bin).
struct RetentionModel::FitState {
  const std::vector<double>& censored;
  const std::vector<double>& censored_in_bin;
  std::vector<double> returned, total, alive;  // per class
  std::vector<double> events;                  // returns per bin
  std::vector<double> ended_in, exposure;      // per bin, of conversations that come back (expected)
  std::vector<double> back;  // P(back by its censoring time | comes back), per cell
  double alive_total = 0;
  double seen_total = 0;
};

void RetentionModel::fit(const std::vector<double>& censored, const std::vector<double>& censored_in_bin) {
  const auto bins = static_cast<size_t>(o_.idle_bins);
  const auto classes = static_cast<size_t>(o_.classes);
  FitState f{censored, censored_in_bin, std::vector<double>(classes, 0), std::vector<double>(classes, 0),
             std::vector<double>(classes, 0), std::vector<double>(bins, 0), std::vector<double>(bins),
             std::vector<double>(bins), std::vector<double>(classes * bins, 0)};
  for (size_t c = 0; c < classes; ++c) {
    for (size_t b = 0; b < bins; ++b) {
      f.returned[c] += returns_[c * bins + b];
      f.total[c] += returns_[c * bins + b] + censored[c * bins + b];
      f.events[b] += returns_[c * bins + b];
    }
  }
  for (int32_t step = 0; step < o_.em_steps; ++step) {
    survival_starts();
    expect_returns(f);
    fit_hazards(f);
    fit_return_probabilities(f);
  }
  survival_starts();
}

void RetentionModel::survival_starts() {
  double log_s = 0;
  for (size_t b = 0; b < static_cast<size_t>(o_.idle_bins); ++b) {
    log_s_start_[b] = log_s;
    log_s -= hazard_[b] * widths_[b];
  }
}

// E: the probability that a censored observation is of a conversation that comes back, at the
// mean censoring time of its cell.
void RetentionModel::expect_returns(FitState& f) const {
  const auto bins = static_cast<size_t>(o_.idle_bins);
  std::fill(f.ended_in.begin(), f.ended_in.end(), 0);
  std::fill(f.exposure.begin(), f.exposure.end(), 0);
  f.alive_total = 0;
  f.seen_total = 0;
  for (size_t c = 0; c < static_cast<size_t>(o_.classes); ++c) {
    f.alive[c] = f.returned[c];
    for (size_t b = 0; b < bins; ++b) {
      const size_t i = c * bins + b;
      double alive_censored = 0;
      double alive_in_bin = 0;
      if (f.censored[i] > 0) {
        const double mean_in_bin = f.censored_in_bin[i] / f.censored[i];
        const double log_s = log_s_start_[b] - hazard_[b] * mean_in_bin;
        f.back[i] = -std::expm1(log_s);
        const double w = std::exp(log_alive(p_[c], log_s));
        alive_censored = w * f.censored[i];
        alive_in_bin = w * f.censored_in_bin[i];
      }
      f.alive[c] += alive_censored;
      f.ended_in[b] += returns_[i] + alive_censored;
      f.exposure[b] += returns_in_bin_[i] + alive_in_bin;
    }
    f.alive_total += f.alive[c];
    f.seen_total += f.total[c];
  }
}

// M, hazards: each bin's hazard among conversations that come back (those that ended in a later
// bin spent the whole of this one).
void RetentionModel::fit_hazards(FitState& f) {
  const double prior_hazard = 1.0 / o_.prior_think_s;
  double later = 0;
  for (size_t b = static_cast<size_t>(o_.idle_bins); b-- > 0;) {
    f.exposure[b] += later * widths_[b];
    later += f.ended_in[b];
    const double prior_exposure = o_.prior_hazard_conversations * widths_[b];
    hazard_[b] = (f.events[b] + prior_exposure * prior_hazard) / (f.exposure[b] + prior_exposure);
  }
}

// M, return probabilities: pooled, and per class where the evidence says it differs.
void RetentionModel::fit_return_probabilities(const FitState& f) {
  const auto bins = static_cast<size_t>(o_.idle_bins);
  const auto classes = static_cast<size_t>(o_.classes);
  p_pooled_ = (f.alive_total + o_.prior_conversations * o_.prior_return_probability) / (f.seen_total + o_.prior_conversations);
  std::vector<Censored> group;
  for (size_t c = 0; c < classes; ++c) {
    double a = f.alive[c];
    double n = f.total[c];
    double r = f.returned[c];
    group.clear();
    const auto gather = [&](size_t d, double weight) {
      for (size_t b = 0; b < bins; ++b) {
        if (f.censored[d * bins + b] > 0) group.push_back({weight * f.censored[d * bins + b], f.back[d * bins + b]});
      }
    };
    gather(c, 1);
    for (const size_t d : {c - 1, c + 1}) {  // c - 1 wraps past the end for c = 0
      if (d < classes) {
        a += o_.neighbour_weight * f.alive[d];
        n += o_.neighbour_weight * f.total[d];
        r += o_.neighbour_weight * f.returned[d];
        gather(d, o_.neighbour_weight);
      }
    }
    // A class parts from the pooled p only on overwhelming evidence that it comes back
    // differently; otherwise every class has the pooled p and the order is exactly LRU's.
    // Shrinkage alone let a few dozen conversations move p_c by chance, and acting on a small
    // difference cost more than it saved. Hence a likelihood-ratio test, and a strict one
    // (see class_split_statistic). It tests the data the estimate uses, so a class that passes
    // keeps the estimate it would have had without the gate.
    const bool differs = n > 0 && split_statistic(p_pooled_, r, group) > o_.class_split_statistic;
    p_[c] = differs ? (a + o_.class_prior_conversations * p_pooled_) / (n + o_.class_prior_conversations) : p_pooled_;
  }
}

void RetentionModel::build_index_tables() {
  const auto bins = static_cast<size_t>(o_.idle_bins);
  // Expected occupancy over each whole bin of a conversation that comes back, relative to S at
  // the bin's start: the integral of exp(-h x) over the bin.
  std::vector<double> bin_occupancy(bins);
  for (size_t k = 0; k < bins; ++k) {
    const double hw = hazard_[k] * widths_[k];
    bin_occupancy[k] = hw > 1e-12 ? -std::expm1(-hw) / hazard_[k] : widths_[k];
  }
  for (size_t c = 0; c < static_cast<size_t>(o_.classes); ++c) {
    for (size_t j = 0; j < bins; ++j) {
      const double log_pi = log_alive(p_[c], log_s_start_[j]);
      const double pi = std::exp(log_pi);
      double best = log_pi + std::log(hazard_[j]);  // the rate right now (horizon -> 0)
      double occupancy = 0;                          // of a conversation that comes back, relative to S(a)
      // Within a bin of constant hazard the ratio moves monotonically towards that rate, so the
      // best horizon ends at a bin start (or is 0); the open last bin only dilutes it.
      for (size_t k = j; k + 1 < bins; ++k) {
        occupancy += std::exp(log_s_start_[k] - log_s_start_[j]) * bin_occupancy[k];
        const double tau = starts_[k + 1] - starts_[j];
        const double back = -std::expm1(log_s_start_[k + 1] - log_s_start_[j]);  // P(back by then | comes back)
        best = std::max(best, log_pi + std::log(back) - std::log((1 - pi) * tau + pi * occupancy));
      }
      // Never more for a chunk idle longer than another of its class.
      if (j > 0) best = std::min(best, log_index_[c * bins + j - 1]);
      log_index_[c * bins + j] = best;
    }
  }
}

double RetentionModel::log_survival(double idle_seconds) const {
  const auto k = static_cast<size_t>(bin_of(idle_seconds));
  return log_s_start_[k] - hazard_[k] * (idle_seconds - starts_[k]);
}

double RetentionModel::alive_probability(int32_t cls, double idle_seconds) const {
  return std::exp(log_alive(p_[static_cast<size_t>(cls)], log_survival(std::max(0.0, idle_seconds))));
}

double RetentionModel::log_index(int32_t cls, double a) const {
  const int32_t b = bin_of(a);
  const auto k = static_cast<size_t>(b);
  const double at_start = log_index_[slot(cls, b)];
  if (b == o_.idle_bins - 1) {
    // The open last bin has one hazard: the rate falls with P(alive) from the bin's start on.
    const double p = p_[static_cast<size_t>(cls)];
    return at_start + log_alive(p, log_survival(a)) - log_alive(p, log_s_start_[k]);
  }
  // Between bin starts: linear in the idle time in the first bin, in its logarithm after.
  const double t = b == 0 ? a / starts_[1] : std::log(a / starts_[k]) / std::log(starts_[k + 1] / starts_[k]);
  return at_start + std::clamp(t, 0.0, 1.0) * (log_index_[slot(cls, b + 1)] - at_start);
}

double RetentionModel::log_value(const ChunkFacts& c, double now) const {
  if (c.ended) return -std::numeric_limits<double>::infinity();
  return log_index(class_of(c.end_chunks), std::max(0.0, now - c.last_use)) +
         std::log(static_cast<double>(std::max(1, c.chunk_tokens))) -
         std::log(static_cast<double>(std::max<int64_t>(1, c.bytes)));
}

double RetentionModel::value(const ChunkFacts& c, double now) const { return std::exp(log_value(c, now)); }

double RetentionModel::observed_conversations() const {
  double sum = 0;
  for (size_t i = 0; i < returns_.size(); ++i) sum += returns_[i] + drops_[i];
  return sum;
}

}  // namespace mnemo

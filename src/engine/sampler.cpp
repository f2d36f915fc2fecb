#include "engine/sampler.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>

#include "kernels/nn/argmax.h"
#include "kernels/nn/exp_weights.h"
#include "util/mix64.h"

namespace mnemo {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr float kMaxFloat = std::numeric_limits<float>::max();

// Better candidates first: higher logit, then lower id. Ids are unique, so this is a strict total
// order and every partial sort below gives one well-defined answer.
bool ranks_before(const TokenCandidate& a, const TokenCandidate& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.token < b.token);
}

// A NaN would break the ordering the partial sorts rely on and +inf the softmax; a model should
// produce neither, but a bad logit must not take the sampler down with it.
float sanitized(float logit) {
  if (std::isnan(logit)) return kNegInf;
  return std::min(logit, kMaxFloat);
}

// Calls visit(token, logit) for every token in id order, the penalised logits (sorted by id)
// replacing the raw ones: one pass over the vocabulary without copying it.
// With `allowed` (TokenMask's words; empty: every token), only the tokens it holds are visited:
// the others are as if their logits were -inf, and a constrained step's cost follows its mask's
// words, not a masked copy of the vocabulary's logits.
template <class Visit>
void for_each_logit(std::span<const float> logits, std::span<const TokenCandidate> overrides,
                    std::span<const uint64_t> allowed, Visit&& visit) {
  if (!allowed.empty()) {
    size_t o = 0;
    const size_t words = std::min(allowed.size(), (logits.size() + 63) / 64);
    for (size_t w = 0; w < words; ++w) {
      for (uint64_t bits = allowed[w]; bits != 0; bits &= bits - 1) {
        const size_t token = w * 64 + static_cast<size_t>(__builtin_ctzll(bits));
        if (token >= logits.size()) return;
        while (o < overrides.size() && static_cast<size_t>(overrides[o].token) < token) ++o;
        const bool replaced = o < overrides.size() && static_cast<size_t>(overrides[o].token) == token;
        visit(static_cast<int32_t>(token), sanitized(replaced ? overrides[o].logit : logits[token]));
      }
    }
    return;
  }
  size_t next = 0;
  for (const TokenCandidate& replaced : overrides) {
    const auto end = static_cast<size_t>(replaced.token);
    for (; next < end; ++next) visit(static_cast<int32_t>(next), sanitized(logits[next]));
    visit(replaced.token, sanitized(replaced.logit));
    next = end + 1;
  }
  for (; next < logits.size(); ++next) visit(static_cast<int32_t>(next), sanitized(logits[next]));
}

int32_t argmax(std::span<const float> logits, std::span<const TokenCandidate> overrides, std::span<const uint64_t> allowed) {
  // Without penalties or a mask, the SIMD kernel (the same answer: kernels/nn/argmax.h).
  if (overrides.empty() && allowed.empty()) return kernels::argmax(logits.data(), static_cast<int64_t>(logits.size()));
  TokenCandidate best{0, kNegInf};
  // Strictly greater, visited in id order: ties keep the lowest id; 0 when all are -inf (as the
  // kernel answers).
  for_each_logit(logits, overrides, allowed, [&best](int32_t token, float logit) {
    if (logit > best.logit) best = {token, logit};
  });
  return best.token;
}

// Whether top-k leaves out part of a vocabulary of n tokens.
bool top_k_restricts(const SamplingParams& params, size_t n) {
  return params.top_k > 0 && static_cast<size_t>(params.top_k) < n;
}

float max_logit(std::span<const TokenCandidate> candidates) {
  float max = kNegInf;
  for (const TokenCandidate& c : candidates) max = std::max(max, c.logit);
  return max;
}

}  // namespace

Status validate(const SamplingParams& params) {
  if (!std::isfinite(params.temperature)) return make_error("temperature {} is not finite", params.temperature);
  if (params.top_k < 0) return make_error("top_k {} is negative", params.top_k);
  if (!(params.top_p > 0.0f && params.top_p <= 1.0f)) return make_error("top_p {} is not in (0, 1]", params.top_p);
  if (!(params.min_p >= 0.0f && params.min_p <= 1.0f)) return make_error("min_p {} is not in [0, 1]", params.min_p);
  if (!(params.repetition_penalty > 0.0f) || !std::isfinite(params.repetition_penalty)) {
    return make_error("repetition_penalty {} is not a positive number", params.repetition_penalty);
  }
  if (!std::isfinite(params.presence_penalty)) {
    return make_error("presence_penalty {} is not finite", params.presence_penalty);
  }
  if (!std::isfinite(params.frequency_penalty)) {
    return make_error("frequency_penalty {} is not finite", params.frequency_penalty);
  }
  if (params.penalty_last_n < -1) return make_error("penalty_last_n {} is below -1", params.penalty_last_n);
  for (size_t i = 0; i < params.logit_bias.size(); ++i) {
    const auto [token, bias] = params.logit_bias[i];
    if (!std::isfinite(bias)) return make_error("logit_bias of token {} is not finite", token);
    if (i > 0 && params.logit_bias[i - 1].first >= token) return make_error("logit_bias is not sorted by token, each once");
  }
  return ok_status();
}

double sampling_uniform(uint64_t seed, uint64_t step) {
  // Step `step` of a splitmix64 stream that starts at a point derived from the seed.
  return unit_interval(mix64(mix64(seed) + (step + 1) * kSplitMixGamma));
}

bool samples_argmax(const SamplingParams& params) {
  const bool penalties =
      params.repetition_penalty != 1.0f || params.presence_penalty != 0.0f || params.frequency_penalty != 0.0f;
  return !(params.temperature > 0.0f) && (!penalties || params.penalty_last_n == 0) && params.logit_bias.empty();
}

int32_t Sampler::sample(const SamplingParams& params, std::span<const float> logits,
                        std::span<const int32_t> history, uint64_t step, std::span<const uint64_t> allowed) {
  assert(!logits.empty());
  if (logits.empty()) return 0;
  allowed_ = allowed;
  if (!(params.temperature > 0.0f)) {
    apply_penalties(params, logits, history);
    return argmax(logits, penalized_, allowed_);
  }
  const bool cuts = top_k_restricts(params, logits.size()) || params.top_p < 1.0f || params.min_p > 0.0f;
  if (!cuts) {
    apply_penalties(params, logits, history);
    if (penalized_.empty() && allowed_.empty()) {
      return draw_from_all(params.temperature, logits, sampling_uniform(params.seed, step));
    }
    gather_all(logits);  // what candidates() would do without cuts, the penalties already applied
  } else {
    candidates(params, logits, history, allowed);
  }
  if (candidates_.empty()) return 0;  // the mask allowed nothing: no distribution to draw from
  return draw(params.temperature, sampling_uniform(params.seed, step));
}

int32_t Sampler::draw_from_all(float temperature, std::span<const float> logits, double uniform) {
  const auto n = static_cast<int64_t>(logits.size());
  const int32_t best = kernels::argmax(logits.data(), n);
  const float max = sanitized(logits[static_cast<size_t>(best)]);
  if (max == kNegInf) return 0;  // all masked: no distribution to draw from (as draw() answers)
  weights_.resize(logits.size());
  double lane_sums[kernels::kExpWeightLanes + 1];
  kernels::exp_weights(logits.data(), n, max, std::min(temperature, kMaxFloat), weights_.data(), lane_sums);
  double total = 0.0;
  for (double sum : lane_sums) total += sum;
  const double target = uniform * total;
  // The lane whose sums take the running total past the target, then the token in it that does.
  constexpr int kLanes = kernels::kExpWeightLanes;
  const int64_t whole = n / kLanes * kLanes;
  double cumulative = 0.0;
  int32_t last_positive = best;
  for (int lane = 0; lane <= kLanes; ++lane) {
    if (!(lane_sums[lane] > 0.0)) continue;
    if (cumulative + lane_sums[lane] > target) {
      const int64_t begin = lane < kLanes ? lane : whole, end = lane < kLanes ? whole : n;
      const int64_t stride = lane < kLanes ? kLanes : 1;
      for (int64_t i = begin; i < end; i += stride) {
        if (weights_[static_cast<size_t>(i)] <= 0.0f) continue;
        cumulative += weights_[static_cast<size_t>(i)];
        last_positive = static_cast<int32_t>(i);
        if (cumulative > target) return last_positive;
      }
      return last_positive;  // rounding: the lane's own sum and this one differ in the last bits
    }
    cumulative += lane_sums[lane];
  }
  return last_positive;  // rounding left the target just past the sum
}

std::span<const TokenCandidate> Sampler::candidates(const SamplingParams& params, std::span<const float> logits,
                                                    std::span<const int32_t> history, std::span<const uint64_t> allowed) {
  assert(logits.size() <= static_cast<size_t>(std::numeric_limits<int32_t>::max()));
  allowed_ = allowed;
  apply_penalties(params, logits, history);
  const bool restricted = top_k_restricts(params, logits.size());
  if (restricted) {
    gather_top_k(logits, penalized_, static_cast<size_t>(params.top_k));
  } else {
    gather_all(logits);
  }
  apply_top_p(params.top_p, params.min_p, restricted);
  apply_min_p(params.min_p);
  return candidates_;
}

void Sampler::apply_penalties(const SamplingParams& params, std::span<const float> logits,
                              std::span<const int32_t> history) {
  penalized_.clear();
  const bool enabled =
      params.repetition_penalty != 1.0f || params.presence_penalty != 0.0f || params.frequency_penalty != 0.0f;
  if (enabled && params.penalty_last_n != 0) penalize(params, logits, history);
  if (!params.logit_bias.empty()) add_bias(params.logit_bias, logits);
}

void Sampler::add_bias(std::span<const std::pair<int32_t, float>> bias, std::span<const float> logits) {
  // Both lists are sorted by token: one merge, the penalised logit biased where there is one.
  merged_.clear();
  size_t p = 0;
  for (const auto& [token, amount] : bias) {
    if (token < 0 || static_cast<size_t>(token) >= logits.size()) continue;  // not in this vocabulary
    for (; p < penalized_.size() && penalized_[p].token < token; ++p) merged_.push_back(penalized_[p]);
    const bool penalized = p < penalized_.size() && penalized_[p].token == token;
    const float logit = penalized ? penalized_[p++].logit : logits[static_cast<size_t>(token)];
    merged_.push_back({token, logit + amount});
  }
  merged_.insert(merged_.end(), penalized_.begin() + static_cast<std::ptrdiff_t>(p), penalized_.end());
  penalized_.swap(merged_);
}

void Sampler::penalize(const SamplingParams& params, std::span<const float> logits, std::span<const int32_t> history) {
  const size_t window = params.penalty_last_n < 0
                            ? history.size()
                            : std::min(history.size(), static_cast<size_t>(params.penalty_last_n));
  window_.assign(history.end() - static_cast<std::ptrdiff_t>(window), history.end());
  std::sort(window_.begin(), window_.end());
  for (size_t run = 0; run < window_.size();) {
    const int32_t token = window_[run];
    size_t run_end = run + 1;
    while (run_end < window_.size() && window_[run_end] == token) ++run_end;
    const auto count = static_cast<float>(run_end - run);
    run = run_end;
    if (token < 0 || static_cast<size_t>(token) >= logits.size()) continue;  // not in this vocabulary
    float logit = logits[static_cast<size_t>(token)];
    logit = logit <= 0.0f ? logit * params.repetition_penalty : logit / params.repetition_penalty;
    logit -= count * params.frequency_penalty + params.presence_penalty;
    penalized_.push_back({token, logit});
  }
}

void Sampler::gather_all(std::span<const float> logits) {
  candidates_.clear();
  candidates_.reserve(logits.size());
  for_each_logit(logits, penalized_, allowed_, [this](int32_t token, float logit) { candidates_.push_back({token, logit}); });
}

void Sampler::gather_top_k(std::span<const float> logits, std::span<const TokenCandidate> overrides, size_t k) {
  // Collect into a buffer of 2k (+ slack so tiny k does not compact constantly); when it fills,
  // keep the best k and from then on admit only tokens better than the k-th. Linear in the
  // vocabulary whatever the order of the logits, unlike a heap (n log k on rising logits).
  const size_t capacity = 2 * k + 64;
  const auto keep_best_k = [this, k] {
    std::nth_element(candidates_.begin(), candidates_.begin() + static_cast<std::ptrdiff_t>(k - 1),
                     candidates_.end(), ranks_before);
    candidates_.resize(k);
  };
  candidates_.clear();
  candidates_.reserve(capacity);
  // Until the first compaction every token ranks before this sentinel (ids are below INT32_MAX).
  TokenCandidate kth{std::numeric_limits<int32_t>::max(), kNegInf};
  for_each_logit(logits, overrides, allowed_, [&](int32_t token, float logit) {
    const TokenCandidate candidate{token, logit};
    if (!ranks_before(candidate, kth)) return;
    candidates_.push_back(candidate);
    if (candidates_.size() == capacity) {
      keep_best_k();
      kth = candidates_.back();
    }
  });
  if (candidates_.size() > k) keep_best_k();
  std::sort(candidates_.begin(), candidates_.end(), ranks_before);
}

void Sampler::apply_top_p(float top_p, float min_p, bool ranked) {
  if (!(top_p < 1.0f) || candidates_.size() <= 1) return;
  const float max = ranked ? candidates_.front().logit : max_logit(candidates_);
  if (max == kNegInf) return;  // everything masked: nothing to rank by
  double total = 0.0;
  for (const TokenCandidate& c : candidates_) total += std::exp(c.logit - max);
  // Min-p (next) would drop the tokens below its threshold anyway, and they rank last, so dropping
  // them now changes nothing but spares the partial sorts below most of the vocabulary. The total
  // above must still include them: top-p normalises over everything that survived top-k.
  apply_min_p(min_p);
  const double target = static_cast<double>(top_p) * total;

  // Rank only as far as needed: extend the sorted prefix in growing chunks.
  const auto first = candidates_.begin();
  size_t ranked_end = ranked ? candidates_.size() : 0;
  size_t chunk = 64;
  double cumulative = 0.0;
  for (size_t i = 0; i < candidates_.size(); ++i) {
    if (i == ranked_end) {
      ranked_end = std::min(candidates_.size(), i + chunk);
      chunk *= 4;
      const auto begin = first + static_cast<std::ptrdiff_t>(i);
      const auto end = first + static_cast<std::ptrdiff_t>(ranked_end);
      if (end != candidates_.end()) std::nth_element(begin, end, candidates_.end(), ranks_before);
      std::sort(begin, end, ranks_before);
    }
    cumulative += std::exp(candidates_[i].logit - max);
    if (cumulative >= target) {
      candidates_.resize(i + 1);
      return;
    }
  }
}

void Sampler::apply_min_p(float min_p) {
  if (!(min_p > 0.0f)) return;
  const float max = max_logit(candidates_);
  if (max == kNegInf) return;
  // p < min_p * p_max  <=>  logit < max + log(min_p); min_p is capped at 1 so the best survives.
  const float threshold = max + std::log(std::min(min_p, 1.0f));
  std::erase_if(candidates_, [threshold](const TokenCandidate& c) { return c.logit < threshold; });
}

int32_t Sampler::draw(float temperature, double uniform) {
  assert(!candidates_.empty());
  const float max = max_logit(candidates_);
  if (max == kNegInf) return candidates_.front().token;  // all masked: no distribution to draw from
  // Divided, not multiplied by 1/T: a tiny T must give exp(0 / T) = 1 for the best, not 0 * inf.
  const float clamped_temperature = std::min(temperature, kMaxFloat);
  weights_.resize(candidates_.size());
  double total = 0.0;
  for (size_t i = 0; i < candidates_.size(); ++i) {
    weights_[i] = std::exp((candidates_[i].logit - max) / clamped_temperature);
    total += weights_[i];
  }
  const double target = uniform * total;
  double cumulative = 0.0;
  size_t last_positive = 0;
  for (size_t i = 0; i < candidates_.size(); ++i) {
    if (weights_[i] <= 0.0f) continue;
    cumulative += weights_[i];
    last_positive = i;
    if (cumulative > target) return candidates_[i].token;
  }
  return candidates_[last_positive].token;  // rounding left the target just past the sum
}

Logprobs Sampler::logprobs(std::span<const float> logits, int32_t token, int32_t top_n) {
  assert(!logits.empty());
  float max = kNegInf;
  for (float logit : logits) max = std::max(max, sanitized(logit));
  Logprobs out;
  out.chosen = {token, kNegInf};
  if (max == kNegInf) return out;  // everything masked: no distribution
  double sum = 0.0;
  for (float logit : logits) sum += std::exp(sanitized(logit) - max);
  const double log_normalizer = static_cast<double>(max) + std::log(sum);
  const auto logprob = [log_normalizer](float logit) {
    return static_cast<float>(static_cast<double>(logit) - log_normalizer);
  };

  if (token >= 0 && static_cast<size_t>(token) < logits.size()) {
    out.chosen.logprob = logprob(sanitized(logits[static_cast<size_t>(token)]));
  }
  if (top_n <= 0) return out;
  const size_t n = std::min(static_cast<size_t>(top_n), logits.size());
  allowed_ = {};
  gather_top_k(logits, {}, n);
  out.top.reserve(n);
  for (const TokenCandidate& c : candidates_) out.top.push_back({c.token, logprob(c.logit)});
  return out;
}

}  // namespace mnemo

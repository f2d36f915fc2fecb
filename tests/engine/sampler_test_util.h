// Helpers shared by the sampler tests.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <span>
#include <vector>

#include "engine/sampler.h"

namespace mnemo::sampler_testing {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

inline SamplingParams greedy() {
  SamplingParams params;
  params.temperature = 0.0f;
  return params;
}

inline SamplingParams plain(uint64_t seed = 0) {
  SamplingParams params;
  params.seed = seed;
  return params;
}

inline std::vector<float> log_of(const std::vector<double>& probs) {
  std::vector<float> logits;
  for (double p : probs) logits.push_back(static_cast<float>(std::log(p)));
  return logits;
}

inline std::vector<float> random_logits(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> logits(n);
  for (float& logit : logits) logit = normal(rng);
  return logits;
}

inline std::vector<int32_t> tokens_of(std::span<const TokenCandidate> candidates) {
  std::vector<int32_t> tokens;
  for (const TokenCandidate& c : candidates) tokens.push_back(c.token);
  return tokens;
}

inline std::vector<int32_t> sorted_tokens_of(std::span<const TokenCandidate> candidates) {
  std::vector<int32_t> tokens = tokens_of(candidates);
  std::sort(tokens.begin(), tokens.end());
  return tokens;
}

}  // namespace mnemo::sampler_testing

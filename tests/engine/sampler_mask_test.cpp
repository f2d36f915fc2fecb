// Sampling with a mask of allowed tokens (constrained decoding): the same as sampling the logits
// with every other token at -inf, without that copy of the row.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <vector>

#include "engine/sampler.h"
#include "engine/sampler_test_util.h"
#include "util/token_mask.h"

namespace mnemo {
namespace {

using namespace sampler_testing;  // NOLINT: test helpers

// Sparse (a structural position: a few dozen tokens), dense (inside a string: most of them),
// one token, and one word's worth at the vocabulary's ragged end.
std::vector<TokenMask> masks_for(int32_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<TokenMask> masks(4);
  for (TokenMask& m : masks) m.clear(n);
  std::bernoulli_distribution sparse(0.002), dense(0.8);
  for (int32_t t = 0; t < n; ++t) {
    if (sparse(rng)) masks[0].set(t);
    if (dense(rng)) masks[1].set(t);
    if (t >= n - 64) masks[3].set(t);
  }
  masks[2].set(n / 2 + 3);
  return masks;
}

std::vector<float> masked_copy(const std::vector<float>& logits, const TokenMask& mask) {
  std::vector<float> out(logits);
  for (int32_t t = 0; t < static_cast<int32_t>(out.size()); ++t) {
    if (!mask.test(t)) out[static_cast<size_t>(t)] = -kInf;
  }
  return out;
}

std::vector<SamplingParams> parameter_sets() {
  std::vector<SamplingParams> sets;
  SamplingParams p = greedy();
  sets.push_back(p);
  p.repetition_penalty = 1.3f;  // greedy through the penalised path
  sets.push_back(p);
  p = plain(5);
  p.temperature = 0.7f;
  p.top_k = 40;
  p.top_p = 0.95f;
  p.min_p = 0.05f;  // llama-server's defaults
  sets.push_back(p);
  p.top_k = 0;  // top-p and min-p alone
  sets.push_back(p);
  p.presence_penalty = 0.5f;
  p.logit_bias = {{7, 3.0f}, {1000, -2.0f}};
  sets.push_back(p);
  return sets;
}

TEST(SamplerMask, DrawsWhatTheMaskedCopyDraws) {
  constexpr int32_t kVocab = 262144 + 37;  // Gemma's, and a ragged last word
  const std::vector<float> logits = random_logits(kVocab, 3, 2.0f);
  const std::vector<int32_t> history = {7, 7, 1000, 55, kVocab - 5};
  Sampler with_mask, with_copy;
  for (const TokenMask& mask : masks_for(kVocab, 11)) {
    const std::vector<float> copy = masked_copy(logits, mask);
    for (const SamplingParams& params : parameter_sets()) {
      for (uint64_t step = 0; step < 20; ++step) {
        const int32_t got = with_mask.sample(params, logits, history, step, mask.words());
        EXPECT_EQ(got, with_copy.sample(params, copy, history, step)) << "allowed " << mask.count() << ", step " << step;
        EXPECT_TRUE(mask.test(got)) << got;
      }
    }
  }
}

TEST(SamplerMask, CandidatesAreTheMaskedCopysFiniteOnes) {
  constexpr int32_t kVocab = 5000;
  const std::vector<float> logits = random_logits(kVocab, 4);
  Sampler with_mask, with_copy;
  for (const TokenMask& mask : masks_for(kVocab, 12)) {
    const std::vector<float> copy = masked_copy(logits, mask);
    for (const SamplingParams& params : parameter_sets()) {
      std::vector<int32_t> want;
      for (const TokenCandidate& c : with_copy.candidates(params, copy, {})) {
        if (c.logit > -kInf) want.push_back(c.token);
      }
      EXPECT_EQ(tokens_of(with_mask.candidates(params, logits, {}, mask.words())), want) << "allowed " << mask.count();
    }
  }
}

TEST(SamplerMask, WithoutCutsTheDrawFollowsTheSoftmaxOverTheAllowedTokens) {
  // Ten tokens, four allowed with probabilities 0.4, 0.3, 0.2, 0.1 among themselves.
  std::vector<float> logits(10, 5.0f);
  const std::map<int32_t, double> allowed = {{1, 0.4}, {4, 0.3}, {6, 0.2}, {9, 0.1}};
  TokenMask mask;
  mask.clear(10);
  for (const auto& [t, p] : allowed) {
    mask.set(t);
    logits[static_cast<size_t>(t)] = static_cast<float>(std::log(p));
  }
  Sampler sampler;
  std::map<int32_t, int> counts;
  constexpr int kDraws = 20000;
  for (uint64_t step = 0; step < kDraws; ++step) ++counts[sampler.sample(plain(8), logits, {}, step, mask.words())];
  double chi = 0.0;
  for (const auto& [t, p] : allowed) chi += std::pow(counts[t] - p * kDraws, 2) / (p * kDraws);
  EXPECT_EQ(counts.size(), allowed.size()) << "a token outside the mask was drawn";
  EXPECT_LT(chi, 16.27);  // 3 degrees of freedom, significance 0.001
}

TEST(SamplerMask, AMaskThatAllowsNothingGivesTokenZero) {
  const std::vector<float> logits = random_logits(300, 5);
  TokenMask nothing;
  nothing.clear(300);
  Sampler sampler;
  for (const SamplingParams& params : parameter_sets()) EXPECT_EQ(sampler.sample(params, logits, {}, 0, nothing.words()), 0);
  EXPECT_EQ(sampler.sample(plain(1), logits, {}, 0, nothing.words()), 0);
}

}  // namespace
}  // namespace mnemo

// Sampler filters and penalties on exact cases, and against brute-force versions on large
// random vocabularies.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "engine/sampler.h"
#include "engine/sampler_test_util.h"

namespace mnemo {
namespace {

using namespace sampler_testing;  // NOLINT: test helpers
using ::testing::ElementsAre;

// --- top-k ----------------------------------------------------------------------------------------

TEST(SamplerTopK, TopKOneEqualsGreedy) {
  Sampler sampler;
  for (uint32_t trial = 0; trial < 20; ++trial) {
    const std::vector<float> logits = random_logits(3000, 100 + trial);
    SamplingParams params = plain(trial);
    params.top_k = 1;
    params.temperature = 1.7f;
    EXPECT_EQ(sampler.sample(params, logits, {}, trial), sampler.sample(greedy(), logits, {}, 0));
  }
  SamplingParams params = plain();
  params.top_k = 1;
  EXPECT_EQ(sampler.sample(params, std::vector<float>{1.0f, 3.0f, 3.0f}, {}, 0), 1);
}

TEST(SamplerTopK, KeepsTheKBestRanked) {
  Sampler sampler;
  SamplingParams params = plain();
  params.top_k = 3;
  EXPECT_THAT(tokens_of(sampler.candidates(params, std::vector<float>{0.5f, 2.0f, -1.0f, 2.0f, 1.0f, 0.7f}, {})),
              ElementsAre(1, 3, 4));
  params.top_k = 2;  // a tie at the cut keeps the lower id
  EXPECT_THAT(tokens_of(sampler.candidates(params, std::vector<float>{1.0f, 5.0f, 1.0f, 1.0f}, {})),
              ElementsAre(1, 0));
  params.top_k = 10;  // larger than the vocabulary: off
  EXPECT_EQ(sampler.candidates(params, std::vector<float>{1.0f, 2.0f}, {}).size(), 2u);
}

TEST(SamplerTopK, MatchesAFullSortForAnyLogitOrder) {
  Sampler sampler;
  std::vector<float> rising(20000);
  std::iota(rising.begin(), rising.end(), 0.0f);  // every token beats the ones kept so far
  std::vector<float> falling(rising.rbegin(), rising.rend());
  std::vector<float> coarse = random_logits(20000, 5);
  for (float& logit : coarse) logit = std::round(logit * 4.0f);  // many ties
  for (const std::vector<float>* logits : {&rising, &falling, &coarse}) {
    for (int32_t k : {1, 2, 40, 1000, 19999}) {
      std::vector<TokenCandidate> all;
      for (size_t i = 0; i < logits->size(); ++i) all.push_back({static_cast<int32_t>(i), (*logits)[i]});
      std::sort(all.begin(), all.end(), [](const TokenCandidate& a, const TokenCandidate& b) {
        return a.logit > b.logit || (a.logit == b.logit && a.token < b.token);
      });
      all.resize(static_cast<size_t>(k));
      SamplingParams params = plain();
      params.top_k = k;
      EXPECT_EQ(tokens_of(sampler.candidates(params, *logits, {})), tokens_of(all)) << "k " << k;
    }
  }
}

// --- top-p ----------------------------------------------------------------------------------------

std::vector<int32_t> top_p_tokens(const std::vector<float>& logits, float top_p, int32_t top_k = 0) {
  Sampler sampler;
  SamplingParams params = plain();
  params.top_p = top_p;
  params.top_k = top_k;
  return sorted_tokens_of(sampler.candidates(params, logits, {}));
}

TEST(SamplerTopP, KeepsTheSmallestSetReachingP) {
  // Four equal tokens: exactly 0.25 each, so the cumulative sums are exact.
  const std::vector<float> equal(4, 0.0f);
  EXPECT_THAT(top_p_tokens(equal, 0.5f), ElementsAre(0, 1));  // reaching p exactly is enough
  EXPECT_THAT(top_p_tokens(equal, 0.51f), ElementsAre(0, 1, 2));
  EXPECT_THAT(top_p_tokens(equal, 0.25f), ElementsAre(0));
  EXPECT_THAT(top_p_tokens(equal, 0.99f), ElementsAre(0, 1, 2, 3));
  // 0.5, 0.25, 0.125, 0.125 (tokens 2, 0, 3, 1): cumulative 0.5, 0.75, 0.875, 1.
  const std::vector<float> halves = log_of({0.25, 0.125, 0.5, 0.125});
  EXPECT_THAT(top_p_tokens(halves, 0.4f), ElementsAre(2));
  EXPECT_THAT(top_p_tokens(halves, 0.74f), ElementsAre(0, 2));
  EXPECT_THAT(top_p_tokens(halves, 0.76f), ElementsAre(0, 1, 2));  // 1 and 3 tie: lower id first
  EXPECT_THAT(top_p_tokens(halves, 0.9f), ElementsAre(0, 1, 2, 3));
  EXPECT_THAT(top_p_tokens(halves, 1.0f), ElementsAre(0, 1, 2, 3));
  EXPECT_THAT(top_p_tokens(halves, 0.0f), ElementsAre(2));  // always at least one
}

TEST(SamplerTopP, RenormalisesOverTheTopKSurvivors) {
  const std::vector<float> equal(8, 0.0f);
  EXPECT_THAT(top_p_tokens(equal, 0.5f), ElementsAre(0, 1, 2, 3));
  EXPECT_THAT(top_p_tokens(equal, 0.5f, 4), ElementsAre(0, 1));  // 0.25 each within the top 4
}

// The same filter written the slow, obvious way: full sort, softmax, walk.
std::vector<int32_t> brute_force_top_p_min_p(const std::vector<float>& logits, double top_p, double min_p) {
  std::vector<TokenCandidate> all;
  for (size_t i = 0; i < logits.size(); ++i) all.push_back({static_cast<int32_t>(i), logits[i]});
  std::sort(all.begin(), all.end(), [](const TokenCandidate& a, const TokenCandidate& b) {
    return a.logit > b.logit || (a.logit == b.logit && a.token < b.token);
  });
  float max = -kInf;
  for (float logit : logits) max = std::max(max, logit);
  double total = 0.0;
  for (float logit : logits) total += std::exp(logit - max);
  double cumulative = 0.0;
  std::vector<int32_t> kept;
  for (const TokenCandidate& c : all) {
    if (c.logit < max + std::log(static_cast<float>(min_p))) break;
    kept.push_back(c.token);
    cumulative += std::exp(c.logit - max);
    if (cumulative >= top_p * total) break;
  }
  std::sort(kept.begin(), kept.end());
  return kept;
}

TEST(SamplerTopP, MatchesAFullSortOnLargeVocabularies) {
  Sampler sampler;
  // Flat logits keep tens of thousands of tokens (many ranking rounds); peaked ones only a few.
  for (float scale : {0.3f, 1.0f, 4.0f}) {
    const std::vector<float> logits = random_logits(50000, 6, scale);
    for (float top_p : {0.1f, 0.5f, 0.9f, 0.99f}) {
      for (float min_p : {0.0f, 0.05f}) {
        SamplingParams params = plain();
        params.top_p = top_p;
        params.min_p = min_p;
        const std::vector<int32_t> kept = sorted_tokens_of(sampler.candidates(params, logits, {}));
        EXPECT_EQ(kept, brute_force_top_p_min_p(logits, top_p, min_p))
            << "scale " << scale << " top_p " << top_p << " min_p " << min_p;
      }
    }
  }
}

// --- min-p ----------------------------------------------------------------------------------------

TEST(SamplerMinP, RemovesTokensBelowMinPTimesTheMaxProbability) {
  Sampler sampler;
  // Relative to the best: 1, 0.5, 0.25, 0.2, 0.1.
  const std::vector<float> logits = log_of({0.1, 0.05, 0.025, 0.02, 0.01});
  SamplingParams params = plain();
  params.min_p = 0.22f;
  EXPECT_THAT(tokens_of(sampler.candidates(params, logits, {})), ElementsAre(0, 1, 2));
  params.min_p = 0.3f;
  EXPECT_THAT(tokens_of(sampler.candidates(params, logits, {})), ElementsAre(0, 1));
  params.min_p = 0.05f;
  EXPECT_THAT(tokens_of(sampler.candidates(params, logits, {})), ElementsAre(0, 1, 2, 3, 4));
  params.min_p = 1.0f;
  EXPECT_THAT(tokens_of(sampler.candidates(params, logits, {})), ElementsAre(0));
  params.min_p = 5.0f;  // out of range, but the best token always survives
  EXPECT_THAT(tokens_of(sampler.candidates(params, logits, {})), ElementsAre(0));
}

TEST(SamplerMinP, AppliesAfterTopP) {
  Sampler sampler;
  const std::vector<float> logits = log_of({0.4, 0.3, 0.2, 0.1});
  SamplingParams params = plain();
  params.top_p = 0.95f;  // keeps all four (0.9 < 0.95)
  params.min_p = 0.4f;   // then drops 0.1 (< 0.16), keeps 0.2 (>= 0.16)
  EXPECT_THAT(sorted_tokens_of(sampler.candidates(params, logits, {})), ElementsAre(0, 1, 2));
  params.top_p = 0.6f;  // keeps 0.4 and 0.3; min-p removes nothing more
  EXPECT_THAT(sorted_tokens_of(sampler.candidates(params, logits, {})), ElementsAre(0, 1));
}

// --- penalties ------------------------------------------------------------------------------------

std::vector<float> penalised(const SamplingParams& params, const std::vector<float>& logits,
                             const std::vector<int32_t>& history) {
  Sampler sampler;
  std::vector<float> out;
  for (const TokenCandidate& c : sampler.candidates(params, logits, history)) out.push_back(c.logit);
  return out;
}

const std::vector<float> kPenaltyLogits = {2.0f, -2.0f, 0.5f, 1.0f, 0.0f};
const std::vector<int32_t> kPenaltyHistory = {0, 1, 1, 3, 4};

TEST(SamplerPenalties, RepetitionDividesPositiveAndMultipliesNegativeLogits) {
  SamplingParams params = plain();
  params.repetition_penalty = 2.0f;
  EXPECT_THAT(penalised(params, kPenaltyLogits, kPenaltyHistory), ElementsAre(1.0f, -4.0f, 0.5f, 0.5f, 0.0f));
  params.repetition_penalty = 0.5f;  // below 1 it rewards repeats
  EXPECT_THAT(penalised(params, kPenaltyLogits, kPenaltyHistory), ElementsAre(4.0f, -1.0f, 0.5f, 2.0f, 0.0f));
}

TEST(SamplerPenalties, PresenceSubtractsOnceFrequencyPerOccurrence) {
  SamplingParams params = plain();
  params.presence_penalty = 0.5f;
  EXPECT_THAT(penalised(params, kPenaltyLogits, kPenaltyHistory), ElementsAre(1.5f, -2.5f, 0.5f, 0.5f, -0.5f));
  params.presence_penalty = 0.0f;
  params.frequency_penalty = 0.25f;
  EXPECT_THAT(penalised(params, kPenaltyLogits, kPenaltyHistory), ElementsAre(1.75f, -2.5f, 0.5f, 0.75f, -0.25f));
  params.frequency_penalty = -1.0f;  // negative values encourage repeats
  EXPECT_THAT(penalised(params, kPenaltyLogits, kPenaltyHistory), ElementsAre(3.0f, 0.0f, 0.5f, 2.0f, 1.0f));
}

TEST(SamplerPenalties, RepetitionComesBeforePresenceAndFrequency) {
  SamplingParams params = plain();
  params.repetition_penalty = 2.0f;
  params.presence_penalty = 0.5f;
  params.frequency_penalty = 0.25f;
  // token 0: 2/2 - 0.25 - 0.5; token 1: -2*2 - 0.5 - 0.5; token 3: 1/2 - 0.75; token 4: 0 - 0.75.
  EXPECT_THAT(penalised(params, kPenaltyLogits, kPenaltyHistory), ElementsAre(0.25f, -5.0f, 0.5f, -0.25f, -0.75f));
}

TEST(SamplerPenalties, PenaltyLastNSetsTheWindow) {
  SamplingParams params = plain();
  params.presence_penalty = 1.0f;
  params.frequency_penalty = 0.5f;
  const std::vector<float> zeros(4, 0.0f);
  const std::vector<int32_t> history = {0, 0, 1, 2, 2};
  params.penalty_last_n = 2;  // {2, 2}
  EXPECT_THAT(penalised(params, zeros, history), ElementsAre(0.0f, 0.0f, -2.0f, 0.0f));
  params.penalty_last_n = 3;  // {1, 2, 2}
  EXPECT_THAT(penalised(params, zeros, history), ElementsAre(0.0f, -1.5f, -2.0f, 0.0f));
  params.penalty_last_n = -1;  // everything
  EXPECT_THAT(penalised(params, zeros, history), ElementsAre(-2.0f, -1.5f, -2.0f, 0.0f));
  params.penalty_last_n = 1000;  // longer than the history
  EXPECT_THAT(penalised(params, zeros, history), ElementsAre(-2.0f, -1.5f, -2.0f, 0.0f));
  params.penalty_last_n = 0;  // none
  EXPECT_THAT(penalised(params, zeros, history), ElementsAre(0.0f, 0.0f, 0.0f, 0.0f));
}

TEST(SamplerPenalties, TokensOutsideTheVocabularyAreIgnored) {
  SamplingParams params = plain();
  params.presence_penalty = 1.0f;
  EXPECT_THAT(penalised(params, {0.0f, 0.0f}, {-1, 2, 1000, 1, std::numeric_limits<int32_t>::max()}),
              ElementsAre(0.0f, -1.0f));
}

TEST(SamplerPenalties, ApplyBeforeTopK) {
  Sampler sampler;
  SamplingParams params = plain();
  params.top_k = 1;
  params.presence_penalty = 10.0f;
  EXPECT_THAT(tokens_of(sampler.candidates(params, std::vector<float>{5.0f, 4.0f}, std::vector<int32_t>{0})),
              ElementsAre(1));
}

}  // namespace
}  // namespace mnemo

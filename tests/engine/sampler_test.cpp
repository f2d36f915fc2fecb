// Sampler: greedy, determinism, the distribution it draws from, and speed on a Gemma-sized
// vocabulary. Every random test uses fixed seeds, so its outcome never changes between runs.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <numeric>
#include <set>
#include <vector>

#include "engine/sampler.h"
#include "engine/sampler_test_util.h"

namespace mnemo {
namespace {

using namespace sampler_testing;  // NOLINT: test helpers

// Pearson's chi-square statistic of `draws` samples against the probabilities `expected`.
double chi_square(const SamplingParams& params, const std::vector<float>& logits, const std::vector<double>& expected,
                  int draws) {
  Sampler sampler;
  std::vector<int> counts(logits.size(), 0);
  for (int step = 0; step < draws; ++step) ++counts.at(static_cast<size_t>(sampler.sample(params, logits, {}, step)));
  double statistic = 0.0;
  for (size_t i = 0; i < expected.size(); ++i) {
    const double want = expected[i] * draws;
    statistic += (counts[i] - want) * (counts[i] - want) / want;
  }
  return statistic;
}

std::vector<double> softmax(const std::vector<float>& logits, double temperature) {
  const double max = *std::max_element(logits.begin(), logits.end());
  std::vector<double> probs;
  for (float logit : logits) probs.push_back(std::exp((logit - max) / temperature));
  const double total = std::accumulate(probs.begin(), probs.end(), 0.0);
  for (double& p : probs) p /= total;
  return probs;
}

// Chi-square critical value for 6 degrees of freedom at significance 0.001.
constexpr double kChiSquare6df = 22.46;
const std::vector<double> kSevenProbs = {0.4, 0.25, 0.15, 0.1, 0.05, 0.03, 0.02};

// --- greedy -------------------------------------------------------------------------------------

TEST(SamplerGreedy, PicksTheArgmax) {
  Sampler sampler;
  EXPECT_EQ(sampler.sample(greedy(), std::vector<float>{0.1f, 3.0f, -1.0f, 2.9f}, {}, 0), 1);
  EXPECT_EQ(sampler.sample(greedy(), std::vector<float>{-5.0f, -4.0f, -6.0f}, {}, 0), 1);
  EXPECT_EQ(sampler.sample(greedy(), std::vector<float>{7.0f}, {}, 0), 0);
  const std::vector<float> big = random_logits(262144, 1);
  const auto best = std::max_element(big.begin(), big.end()) - big.begin();
  EXPECT_EQ(sampler.sample(greedy(), big, {}, 0), best);
}

TEST(SamplerGreedy, TiesGoToTheLowestId) {
  Sampler sampler;
  EXPECT_EQ(sampler.sample(greedy(), std::vector<float>{1.0f, 2.0f, 2.0f, 2.0f}, {}, 0), 1);
  EXPECT_EQ(sampler.sample(greedy(), std::vector<float>(100, 0.0f), {}, 0), 0);
}

TEST(SamplerGreedy, NonPositiveTemperaturesAreGreedyWhateverTheSeedOrStep) {
  Sampler sampler;
  const std::vector<float> logits = {0.0f, 0.5f, 0.4f};
  for (float temperature : {0.0f, -1.0f, -0.0f, kNaN}) {
    SamplingParams params = greedy();
    params.temperature = temperature;
    for (uint64_t step = 0; step < 50; ++step) {
      params.seed = step * 7;
      EXPECT_EQ(sampler.sample(params, logits, {}, step), 1) << temperature;
    }
  }
}

TEST(SamplerGreedy, SeesPenalisedLogits) {
  Sampler sampler;
  SamplingParams params = greedy();
  params.repetition_penalty = 2.0f;
  const std::vector<float> logits = {2.0f, 1.9f, 0.0f};
  EXPECT_EQ(sampler.sample(params, logits, std::vector<int32_t>{0}, 0), 1);
  EXPECT_EQ(sampler.sample(params, logits, std::vector<int32_t>{0, 1}, 0), 0);  // 1.0 vs 0.95
}

TEST(SamplerLogitBias, MovesTheArgmaxAndBansATokenAfterThePenalties) {
  Sampler sampler;
  SamplingParams params = greedy();
  const std::vector<float> logits = {2.0f, 1.9f, 0.0f, 1.0f};
  params.logit_bias = {{0, -100.0f}, {2, 1.5f}};  // token 0 banned; token 2 at 1.5
  EXPECT_FALSE(samples_argmax(params));            // the model's argmax alone no longer answers
  EXPECT_EQ(sampler.sample(params, logits, {}, 0), 1);
  params.logit_bias = {{2, 2.5f}};
  EXPECT_EQ(sampler.sample(params, logits, {}, 0), 2);
  // With a penalty on token 1 (1.9 / 2) and a bias on it (+1.2): 2.15, above token 0's 2.0; the
  // bias adds to the penalised logit, not the raw one (3.1).
  params.repetition_penalty = 2.0f;
  params.logit_bias = {{1, 1.2f}, {3, 1.0f}};
  EXPECT_EQ(sampler.sample(params, logits, std::vector<int32_t>{1}, 0), 1);
  params.logit_bias = {{1, 1.0f}, {3, 1.05f}};  // 1.95 vs 2.05 (token 3): 3 wins
  EXPECT_EQ(sampler.sample(params, logits, std::vector<int32_t>{1}, 0), 3);
  // Out-of-vocabulary ids are ignored by the sampler (the engine refuses them at submit).
  params.logit_bias = {{7, 100.0f}};
  EXPECT_EQ(sampler.sample(params, logits, std::vector<int32_t>{1}, 0), 0);
  params.logit_bias = {{3, 1.0f}, {2, 1.0f}};
  EXPECT_FALSE(validate(params).ok());  // not sorted
}

TEST(SamplerGreedy, CopesWithNanAndInfiniteLogits) {
  Sampler sampler;
  EXPECT_EQ(sampler.sample(greedy(), std::vector<float>{kNaN, 1.0f, kNaN}, {}, 0), 1);
  EXPECT_EQ(sampler.sample(greedy(), std::vector<float>{1.0f, kInf, kInf}, {}, 0), 1);
  EXPECT_EQ(sampler.sample(greedy(), std::vector<float>{-kInf, -kInf}, {}, 0), 0);
  EXPECT_EQ(sampler.sample(greedy(), std::vector<float>{kNaN, kNaN}, {}, 0), 0);
}

// --- determinism ----------------------------------------------------------------------------------

// samples_argmax says when the engine may ask the model for the greedy token only: then sample()
// returns the largest raw logit's index whatever the history; with penalties or a temperature it
// may not.
TEST(SamplerGreedy, SamplesArgmaxExactlyWhenNothingAltersTheLogits) {
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  EXPECT_TRUE(samples_argmax(greedy));
  SamplingParams unwindowed = greedy;
  unwindowed.repetition_penalty = 1.3f;
  unwindowed.penalty_last_n = 0;  // penalties over no tokens
  EXPECT_TRUE(samples_argmax(unwindowed));
  SamplingParams warm = greedy;
  warm.temperature = 0.7f;
  EXPECT_FALSE(samples_argmax(warm));
  // Logits whose largest is token 3, and a history holding it: each penalty moves the answer.
  const std::vector<float> logits = {0.5f, 1.0f, 2.0f, 2.5f, -1.0f};
  const std::vector<int32_t> history = {3, 3, 1};
  Sampler sampler;
  EXPECT_EQ(sampler.sample(greedy, logits, history, 0), 3);
  EXPECT_EQ(sampler.sample(unwindowed, logits, history, 0), 3);
  for (const auto& set : std::vector<std::function<void(SamplingParams&)>>{
           [](SamplingParams& p) { p.repetition_penalty = 1.5f; }, [](SamplingParams& p) { p.presence_penalty = 1.0f; },
           [](SamplingParams& p) { p.frequency_penalty = 0.5f; }}) {
    SamplingParams penalised = greedy;
    set(penalised);
    EXPECT_FALSE(samples_argmax(penalised));
    EXPECT_EQ(sampler.sample(penalised, logits, history, 0), 2);
  }
}

TEST(SamplerDeterminism, SameSeedStepAndLogitsGiveTheSameToken) {
  const std::vector<float> logits = random_logits(1000, 2, 0.1f);
  Sampler first;
  Sampler second;
  SamplingParams params = plain(1234);
  params.top_p = 0.9f;
  for (uint64_t step = 0; step < 200; ++step) {
    const int32_t token = first.sample(params, logits, {}, step);
    EXPECT_EQ(first.sample(params, logits, {}, step), token);
    EXPECT_EQ(second.sample(params, logits, {}, step), token);
  }
}

TEST(SamplerDeterminism, DifferentStepsAndSeedsGiveDifferentDraws) {
  const std::vector<float> uniform(1000, 0.0f);
  Sampler sampler;
  std::vector<int32_t> seed1;
  std::vector<int32_t> seed2;
  for (uint64_t step = 0; step < 1000; ++step) {
    seed1.push_back(sampler.sample(plain(1), uniform, {}, step));
    seed2.push_back(sampler.sample(plain(2), uniform, {}, step));
  }
  // 1000 draws from 1000 tokens hit about 632 distinct ones.
  EXPECT_GT(std::set<int32_t>(seed1.begin(), seed1.end()).size(), 550u);
  EXPECT_GT(std::set<int32_t>(seed2.begin(), seed2.end()).size(), 550u);
  int same = 0;
  for (size_t i = 0; i < seed1.size(); ++i) same += seed1[i] == seed2[i] ? 1 : 0;
  EXPECT_LT(same, 10);  // about 1 expected by chance
}

TEST(SamplerDeterminism, InterleavingRequestsChangesNothing) {
  // Two requests sampled alone, then interleaved in both orders on one shared sampler (as a batch
  // would be), with different params: each request's tokens must not change.
  const std::vector<float> logits_a = random_logits(5000, 3, 2.0f);
  const std::vector<float> logits_b = random_logits(5000, 4, 2.0f);
  SamplingParams a = plain(7);
  a.top_k = 50;
  a.repetition_penalty = 1.3f;
  SamplingParams b = plain(9);
  b.top_p = 0.8f;
  b.min_p = 0.01f;
  b.temperature = 1.5f;
  const auto run = [](Sampler& sampler, const SamplingParams& params, const std::vector<float>& logits,
                      std::vector<int32_t>& history) { history.push_back(sampler.sample(params, logits, history, history.size())); };
  std::vector<int32_t> alone_a;
  std::vector<int32_t> alone_b;
  Sampler fresh;
  for (int i = 0; i < 64; ++i) run(fresh, a, logits_a, alone_a);
  for (int i = 0; i < 64; ++i) run(fresh, b, logits_b, alone_b);
  std::vector<int32_t> mixed_a;
  std::vector<int32_t> mixed_b;
  Sampler shared;
  for (int i = 0; i < 64; ++i) {
    if (i % 2 == 0) {
      run(shared, a, logits_a, mixed_a);
      run(shared, b, logits_b, mixed_b);
    } else {
      run(shared, b, logits_b, mixed_b);
      run(shared, a, logits_a, mixed_a);
    }
  }
  EXPECT_EQ(mixed_a, alone_a);
  EXPECT_EQ(mixed_b, alone_b);
}

TEST(SamplerDeterminism, UniformNumbersAreSpreadOverTheUnitInterval) {
  std::vector<int> deciles(10, 0);
  double sum = 0.0;
  for (uint64_t step = 0; step < 100000; ++step) {
    const double u = sampling_uniform(99, step);
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
    ++deciles[static_cast<size_t>(u * 10)];
  }
  EXPECT_NEAR(sum / 100000, 0.5, 0.005);
  for (int count : deciles) EXPECT_NEAR(count, 10000, 400);
  EXPECT_NE(sampling_uniform(0, 0), sampling_uniform(1, 0));
  EXPECT_NE(sampling_uniform(0, 0), sampling_uniform(0, 1));
  EXPECT_EQ(sampling_uniform(5, 6), sampling_uniform(5, 6));
}

// --- the distribution drawn from ------------------------------------------------------------------

TEST(SamplerDistribution, FrequenciesMatchTheSoftmax) {
  const std::vector<float> logits = log_of(kSevenProbs);
  for (uint64_t seed : {1u, 2u, 3u}) {
    EXPECT_LT(chi_square(plain(seed), logits, kSevenProbs, 20000), kChiSquare6df) << "seed " << seed;
  }
}

// A vocabulary wider than the SIMD lanes (draw_from_all walks them lane by lane, then the tail):
// 1000 tokens in 7 classes, token i of class i % 7 with that class's logit.
TEST(SamplerDistribution, FrequenciesMatchTheSoftmaxOverAWideVocabulary) {
  constexpr size_t kVocab = 1000;
  std::vector<float> logits(kVocab);
  std::vector<double> class_mass(7, 0.0);
  for (size_t i = 0; i < kVocab; ++i) {
    logits[i] = std::log(static_cast<float>(kSevenProbs[i % 7]));
    class_mass[i % 7] += kSevenProbs[i % 7];
  }
  const double total = std::accumulate(class_mass.begin(), class_mass.end(), 0.0);
  for (uint64_t seed : {4u, 5u}) {
    Sampler sampler;
    std::vector<int> counts(7, 0);
    constexpr int kDraws = 20000;
    for (int step = 0; step < kDraws; ++step) ++counts[static_cast<size_t>(sampler.sample(plain(seed), logits, {}, step)) % 7];
    double statistic = 0.0;
    for (size_t c = 0; c < 7; ++c) {
      const double want = class_mass[c] / total * kDraws;
      statistic += (counts[c] - want) * (counts[c] - want) / want;
    }
    EXPECT_LT(statistic, kChiSquare6df) << "seed " << seed;
  }
}

TEST(SamplerDistribution, PenaltiesApplyWithoutCutsToo) {
  // No top-k, top-p or min-p: the draw over the whole vocabulary, with the penalised logits.
  std::vector<float> logits(40, 0.0f);
  const std::vector<int32_t> history = {3, 17, 17, 30};
  SamplingParams params = plain(12);
  params.presence_penalty = 200.0f;  // e^-200: never drawn
  Sampler sampler;
  std::set<int32_t> seen;
  for (uint64_t step = 0; step < 3000; ++step) {
    const int32_t token = sampler.sample(params, logits, history, step);
    EXPECT_TRUE(token != 3 && token != 17 && token != 30) << token;
    seen.insert(token);
  }
  EXPECT_EQ(seen.size(), 37u);
}

TEST(SamplerDistribution, MaskedTokensOfAWideVocabularyAreNeverDrawn) {
  // Every token masked but 5 scattered ones (in several lanes and the tail).
  std::vector<float> logits(1003, -kInf);
  for (size_t i = 0; i < logits.size(); i += 3) logits[i] = kNaN;
  const std::set<int32_t> open = {7, 100, 513, 998, 1001};
  for (int32_t t : open) logits[static_cast<size_t>(t)] = 0.5f * static_cast<float>(t % 4);
  Sampler sampler;
  std::set<int32_t> seen;
  for (uint64_t step = 0; step < 2000; ++step) {
    const int32_t token = sampler.sample(plain(9), logits, {}, step);
    EXPECT_TRUE(open.count(token) == 1) << token;
    seen.insert(token);
  }
  EXPECT_EQ(seen, open);
}

TEST(SamplerDistribution, TemperatureSharpensOrFlattens) {
  const std::vector<float> logits = log_of(kSevenProbs);
  for (float temperature : {0.5f, 2.0f}) {
    SamplingParams params = plain(11);
    params.temperature = temperature;
    EXPECT_LT(chi_square(params, logits, softmax(logits, temperature), 20000), kChiSquare6df) << temperature;
    // ... and the untempered distribution no longer fits.
    EXPECT_GT(chi_square(params, logits, kSevenProbs, 20000), 10 * kChiSquare6df) << temperature;
  }
}

TEST(SamplerDistribution, ExtremeTemperatures) {
  Sampler sampler;
  const std::vector<float> logits = {0.0f, 1.0f, 0.999f, -3.0f};
  SamplingParams cold = plain(5);
  cold.temperature = 1e-6f;
  SamplingParams tiny = plain(5);
  tiny.temperature = std::numeric_limits<float>::denorm_min();
  SamplingParams hot = plain(5);
  hot.temperature = 1e30f;
  std::set<int32_t> hot_tokens;
  for (uint64_t step = 0; step < 200; ++step) {
    EXPECT_EQ(sampler.sample(cold, logits, {}, step), 1);
    EXPECT_EQ(sampler.sample(tiny, logits, {}, step), 1);
    hot_tokens.insert(sampler.sample(hot, logits, {}, step));
  }
  EXPECT_EQ(hot_tokens.size(), 4u);
}

TEST(SamplerDistribution, MaskedTokensAreNeverDrawn) {
  Sampler sampler;
  const std::vector<float> logits = {-kInf, 0.0f, kNaN, 0.0f, -kInf};
  for (uint64_t step = 0; step < 500; ++step) {
    const int32_t token = sampler.sample(plain(3), logits, {}, step);
    EXPECT_TRUE(token == 1 || token == 3) << token;
  }
  // Infinite logits win, and share the draw among themselves.
  std::set<int32_t> drawn;
  for (uint64_t step = 0; step < 200; ++step) {
    drawn.insert(sampler.sample(plain(3), std::vector<float>{5.0f, kInf, 1.0f, kInf}, {}, step));
  }
  EXPECT_EQ(drawn, (std::set<int32_t>{1, 3}));
  EXPECT_EQ(sampler.sample(plain(3), std::vector<float>{-kInf, -kInf, -kInf}, {}, 0), 0);
}

// --- speed ----------------------------------------------------------------------------------------

// The budget holds for optimised builds; sanitizers and -O0 slow everything several times over.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__) || !defined(NDEBUG)
constexpr double kTopKBudgetMs = 50.0;
#else
constexpr double kTopKBudgetMs = 5.0;
#endif

double median_ms(const std::function<void()>& body) {
  std::vector<double> times;
  for (int run = 0; run < 21; ++run) {
    const auto start = std::chrono::steady_clock::now();
    body();
    times.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  std::nth_element(times.begin(), times.begin() + 10, times.end());
  return times[10];
}

TEST(SamplerSpeed, GemmaVocabularyWithTopKIsFast) {
  const std::vector<float> logits = random_logits(262144, 10, 3.0f);
  std::vector<int32_t> history(64);
  for (size_t i = 0; i < history.size(); ++i) history[i] = static_cast<int32_t>(i * 4001 % 262144);
  Sampler sampler;
  SamplingParams params = plain(1);
  params.top_k = 40;
  params.top_p = 0.95f;
  params.temperature = 0.8f;
  params.repetition_penalty = 1.1f;
  uint64_t step = 0;
  const double top_k_ms = median_ms([&] { (void)sampler.sample(params, logits, history, step++); });
  const double greedy_ms = median_ms([&] { (void)sampler.sample(greedy(), logits, history, step++); });
  SamplingParams top_p_only = plain(1);
  top_p_only.top_p = 0.9f;
  top_p_only.min_p = 0.05f;
  const double min_p_ms = median_ms([&] { (void)sampler.sample(top_p_only, logits, history, step++); });
  RecordProperty("top_k_40_ms", std::to_string(top_k_ms));
  std::printf("262144-token vocabulary, median: top_k=40 %.3f ms, greedy %.3f ms, top_p+min_p %.3f ms\n", top_k_ms,
              greedy_ms, min_p_ms);
  EXPECT_LT(top_k_ms, kTopKBudgetMs);
}

}  // namespace
}  // namespace mnemo

// Sampler logprobs (OpenAI-style) and parameter validation.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "engine/sampler.h"
#include "engine/sampler_test_util.h"

namespace mnemo {
namespace {

using namespace sampler_testing;  // NOLINT: test helpers
using ::testing::HasSubstr;

// --- logprobs -------------------------------------------------------------------------------------

TEST(SamplerLogprobs, AreTheLogSoftmaxOfTheRawLogits) {
  Sampler sampler;
  const std::vector<float> logits = log_of({0.1, 0.4, 0.2, 0.2, 0.1});
  const Logprobs lp = sampler.logprobs(logits, 2, 3);
  EXPECT_EQ(lp.chosen.token, 2);
  EXPECT_NEAR(lp.chosen.logprob, std::log(0.2), 1e-6);
  ASSERT_EQ(lp.top.size(), 3u);
  EXPECT_EQ(lp.top[0].token, 1);
  EXPECT_NEAR(lp.top[0].logprob, std::log(0.4), 1e-6);
  EXPECT_EQ(lp.top[1].token, 2);  // tie with token 3: lower id first
  EXPECT_EQ(lp.top[2].token, 3);
  EXPECT_NEAR(lp.top[2].logprob, std::log(0.2), 1e-6);
}

TEST(SamplerLogprobs, ShiftInvariantAndNormalised) {
  Sampler sampler;
  std::vector<float> logits = random_logits(262144, 8, 3.0f);
  const Logprobs lp = sampler.logprobs(logits, 17, 20);
  for (float& logit : logits) logit += 100.0f;
  const Logprobs shifted = sampler.logprobs(logits, 17, 20);
  EXPECT_NEAR(lp.chosen.logprob, shifted.chosen.logprob, 1e-3);
  ASSERT_EQ(lp.top.size(), 20u);
  for (size_t i = 0; i < lp.top.size(); ++i) {
    EXPECT_EQ(lp.top[i].token, shifted.top[i].token);
    if (i > 0) {
      EXPECT_GE(lp.top[i - 1].logprob, lp.top[i].logprob);
    }
  }
  const Logprobs all = sampler.logprobs(std::vector<float>{1.0f, 2.0f, 3.0f}, 0, 10);
  ASSERT_EQ(all.top.size(), 3u);
  double total = 0.0;
  for (const TokenLogprob& t : all.top) total += std::exp(t.logprob);
  EXPECT_NEAR(total, 1.0, 1e-6);
}

TEST(SamplerLogprobs, EdgeCases) {
  Sampler sampler;
  const std::vector<float> logits = {0.0f, 0.0f};
  EXPECT_TRUE(sampler.logprobs(logits, 0, 0).top.empty());
  EXPECT_EQ(sampler.logprobs(logits, 5, 1).chosen.logprob, -kInf);
  EXPECT_EQ(sampler.logprobs(logits, -1, 1).chosen.logprob, -kInf);
  EXPECT_NEAR(sampler.logprobs(logits, 1, 1).chosen.logprob, std::log(0.5), 1e-6);
  EXPECT_EQ(sampler.logprobs(std::vector<float>{-kInf, 0.0f}, 0, 1).chosen.logprob, -kInf);
  EXPECT_EQ(sampler.logprobs(std::vector<float>{kNaN, 0.0f}, 1, 1).chosen.logprob, 0.0f);
  EXPECT_EQ(sampler.logprobs(std::vector<float>{-kInf, -kInf}, 0, 2).chosen.logprob, -kInf);
}

TEST(SamplerLogprobs, IgnorePenaltiesAndFilters) {
  // Logprobs describe the model's distribution; the sampler's settings do not enter.
  Sampler sampler;
  const std::vector<float> logits = log_of({0.5, 0.5});
  SamplingParams params = plain();
  params.repetition_penalty = 3.0f;
  params.top_k = 1;
  (void)sampler.sample(params, logits, std::vector<int32_t>{0}, 0);
  EXPECT_NEAR(sampler.logprobs(logits, 0, 2).chosen.logprob, std::log(0.5), 1e-6);
}

// --- parameters -----------------------------------------------------------------------------------

TEST(SamplerParams, ValidateNamesTheBadParameter) {
  EXPECT_TRUE(validate(SamplingParams{}).ok());
  EXPECT_TRUE(validate(greedy()).ok());
  const auto expect_bad = [](auto change, const char* name) {
    SamplingParams params;
    change(params);
    const Status status = validate(params);
    ASSERT_FALSE(status.ok()) << name;
    EXPECT_THAT(status.error().message(), HasSubstr(name));
  };
  expect_bad([](SamplingParams& p) { p.temperature = kInf; }, "temperature");
  expect_bad([](SamplingParams& p) { p.temperature = kNaN; }, "temperature");
  expect_bad([](SamplingParams& p) { p.top_k = -1; }, "top_k");
  expect_bad([](SamplingParams& p) { p.top_p = 0.0f; }, "top_p");
  expect_bad([](SamplingParams& p) { p.top_p = 1.5f; }, "top_p");
  expect_bad([](SamplingParams& p) { p.min_p = -0.1f; }, "min_p");
  expect_bad([](SamplingParams& p) { p.min_p = 1.1f; }, "min_p");
  expect_bad([](SamplingParams& p) { p.repetition_penalty = 0.0f; }, "repetition_penalty");
  expect_bad([](SamplingParams& p) { p.presence_penalty = kNaN; }, "presence_penalty");
  expect_bad([](SamplingParams& p) { p.frequency_penalty = -kInf; }, "frequency_penalty");
  expect_bad([](SamplingParams& p) { p.penalty_last_n = -2; }, "penalty_last_n");
}

}  // namespace
}  // namespace mnemo

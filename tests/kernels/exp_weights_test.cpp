// exp_weights (kernels/nn/exp_weights.h): every ISA variant gives the scalar reference's bits,
// weights and lane sums alike, on every length around the vector widths; the weights are e^z to
// within a few float roundings, and exactly 0 for -inf, NaN and out-of-range logits.
#include "kernels/nn/exp_weights.h"

#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace mnemo::kernels {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

struct Result {
  std::vector<float> weights;
  std::vector<double> lane_sums = std::vector<double>(kExpWeightLanes + 1);
};

Result run(ExpWeightsFn fn, const std::vector<float>& x, float max, float temperature) {
  Result r;
  r.weights.assign(x.size(), -1.0f);
  fn(x.data(), static_cast<int64_t>(x.size()), max, temperature, r.weights.data(), r.lane_sums.data());
  return r;
}

float largest(const std::vector<float>& x) {
  float m = -kInf;
  for (float v : x) {
    if (!std::isnan(v)) m = std::max(m, std::min(v, FLT_MAX));
  }
  return m;
}

std::vector<float> random_logits(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 6.0f);
  std::vector<float> x(n);
  for (float& v : x) v = normal(rng);
  return x;
}

TEST(ExpWeights, ScalarIsExpWithinRoundingAndSumsItsLanesInOrder) {
  std::mt19937 rng(21);
  const ExpWeightsFn scalar = exp_weights_kernel(Isa::kScalar);
  for (size_t n : {1u, 15u, 16u, 17u, 100u, 4099u}) {
    const std::vector<float> x = random_logits(n, rng);
    const float max = largest(x);
    for (float temperature : {0.3f, 1.0f, 2.5f}) {
      const Result r = run(scalar, x, max, temperature);
      std::vector<double> lanes(kExpWeightLanes + 1, 0.0);
      const size_t whole = n / kExpWeightLanes * kExpWeightLanes;
      for (size_t i = 0; i < n; ++i) {
        const float z = (x[i] - max) / temperature;
        const double want = z < -87.0f ? 0.0 : std::exp(static_cast<double>(z));
        EXPECT_NEAR(r.weights[i], want, 4e-7 * want + 1e-37) << n << " " << i << " z " << z;
        lanes[i < whole ? i % kExpWeightLanes : kExpWeightLanes] += static_cast<double>(r.weights[i]);
      }
      EXPECT_EQ(r.lane_sums, lanes) << n;
    }
  }
}

TEST(ExpWeights, MaskedAndExtremeLogits) {
  const ExpWeightsFn scalar = exp_weights_kernel(Isa::kScalar);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> x = {-kInf, nan, 3.0f, kInf, FLT_MAX, -FLT_MAX, 3.0f - 88.0f, 2.0f};
  const Result r = run(scalar, x, FLT_MAX, 1.0f);  // +inf counts as FLT_MAX: the largest
  EXPECT_EQ(r.weights[0], 0.0f);
  EXPECT_EQ(r.weights[1], 0.0f);
  EXPECT_EQ(r.weights[2], 0.0f);  // FLT_MAX - 3 is far below e^-87
  EXPECT_EQ(r.weights[3], 1.0f);
  EXPECT_EQ(r.weights[4], 1.0f);
  EXPECT_EQ(r.weights[5], 0.0f);  // the difference overflows to -inf
  const std::vector<float> y = {-kInf, nan, 3.0f, 3.0f - 88.0f, 3.0f - 86.0f};
  const Result s = run(scalar, y, 3.0f, 1.0f);
  EXPECT_EQ(s.weights[0], 0.0f);
  EXPECT_EQ(s.weights[1], 0.0f);
  EXPECT_EQ(s.weights[2], 1.0f);
  EXPECT_EQ(s.weights[3], 0.0f);
  EXPECT_GT(s.weights[4], 0.0f);
  EXPECT_EQ(s.lane_sums[kExpWeightLanes], static_cast<double>(s.weights[2]) + static_cast<double>(s.weights[4]));
  // A tiny temperature leaves only the largest.
  const Result t = run(scalar, y, 3.0f, 1e-30f);
  EXPECT_EQ(t.weights[2], 1.0f);
  EXPECT_EQ(t.weights[4], 0.0f);
}

std::vector<Isa> simd_isas() {
  std::vector<Isa> found;
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
    if (isa_supported(isa)) found.push_back(isa);
  }
  return found;
}

class ExpWeightsSimdTest : public ::testing::TestWithParam<Isa> {};

TEST_P(ExpWeightsSimdTest, GivesTheReferencesBits) {
  std::mt19937 rng(22);
  const ExpWeightsFn scalar = exp_weights_kernel(Isa::kScalar);
  const ExpWeightsFn simd = exp_weights_kernel(GetParam());
  std::vector<size_t> lengths;
  for (size_t n = 1; n <= 70; ++n) lengths.push_back(n);
  for (size_t n : {1000u, 4099u, 262144u}) lengths.push_back(n);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (size_t n : lengths) {
    std::vector<float> x = random_logits(n, rng);
    if (n > 8) {  // the awkward values somewhere in the row
      x[n / 2] = -kInf;
      x[n / 3] = nan;
      x[n / 5] = x[0] - 86.9f;
    }
    const float max = largest(x);
    for (float temperature : {0.05f, 0.8f, 1.0f, 7.0f}) {
      const Result want = run(scalar, x, max, temperature);
      const Result got = run(simd, x, max, temperature);
      ASSERT_EQ(std::memcmp(got.weights.data(), want.weights.data(), n * sizeof(float)), 0) << n << " T " << temperature;
      EXPECT_EQ(got.lane_sums, want.lane_sums) << n << " T " << temperature;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Isas, ExpWeightsSimdTest, ::testing::ValuesIn(simd_isas()),
                         [](const auto& param_info) { return std::string(isa_name(param_info.param)); });

}  // namespace
}  // namespace mnemo::kernels

// The greedy argmax (kernels/nn/argmax.h): every ISA variant the CPU has gives the same index as
// a plain first-maximum loop written here, on random rows of every length around the vector
// widths and on the awkward values (ties across lanes, NaN, infinities, nothing but -inf).
#include "kernels/nn/argmax.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace mnemo::kernels {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kLargest = std::numeric_limits<float>::max();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

// The contract, spelled out: NaN is -inf, +inf is the largest float, the first maximum wins, 0
// when nothing beats -inf.
int32_t first_maximum(const std::vector<float>& x) {
  int32_t best = 0;
  float best_value = -kInf;
  for (size_t i = 0; i < x.size(); ++i) {
    const float v = std::isnan(x[i]) ? -kInf : std::min(x[i], kLargest);
    if (v > best_value) {
      best_value = v;
      best = static_cast<int32_t>(i);
    }
  }
  return best;
}

std::vector<Isa> isas() {
  std::vector<Isa> found;
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (isa_supported(isa)) found.push_back(isa);
  }
  return found;
}

class ArgmaxTest : public ::testing::TestWithParam<Isa> {
 protected:
  int32_t run(const std::vector<float>& x) const {
    return argmax_kernel(GetParam())(x.data(), static_cast<int64_t>(x.size()));
  }
};

TEST_P(ArgmaxTest, RandomRowsOfEveryLength) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 4.0f);
  std::vector<int64_t> lengths;
  for (int64_t n = 1; n <= 80; ++n) lengths.push_back(n);
  for (int64_t n : {255, 256, 257, 1000, 4099, 262144, 262147}) lengths.push_back(n);
  for (int64_t n : lengths) {
    std::vector<float> x(static_cast<size_t>(n));
    for (float& v : x) v = normal(rng);
    EXPECT_EQ(run(x), first_maximum(x)) << n;
  }
}

TEST_P(ArgmaxTest, TiesGoToTheLowestIndexWhicheverLanesHoldThem) {
  std::mt19937 rng(12);
  std::uniform_int_distribution<int> level(0, 3);  // few distinct values: many ties
  for (int64_t n : {5, 16, 33, 64, 100, 1027}) {
    for (int trial = 0; trial < 20; ++trial) {
      std::vector<float> x(static_cast<size_t>(n));
      for (float& v : x) v = static_cast<float>(level(rng));
      EXPECT_EQ(run(x), first_maximum(x)) << n << " trial " << trial;
    }
  }
  // The maximum at a late index in an early lane and an early index in a late lane.
  std::vector<float> x(100, 0.0f);
  x[97] = 5.0f;
  x[31] = 5.0f;
  x[40] = 5.0f;
  EXPECT_EQ(run(x), 31);
}

TEST_P(ArgmaxTest, NanInfinitiesAndEmptyRows) {
  for (int64_t n : {1, 7, 16, 40, 130}) {
    const auto size = static_cast<size_t>(n);
    EXPECT_EQ(run(std::vector<float>(size, -kInf)), 0) << n;
    EXPECT_EQ(run(std::vector<float>(size, kNaN)), 0) << n;
    std::vector<float> x(size, kNaN);
    x[size - 1] = -1e30f;
    EXPECT_EQ(run(x), n - 1) << n;  // any finite value beats NaN
    std::vector<float> y(size, -kInf);
    y[size / 2] = kNaN;
    y[size - 1] = -kLargest;
    EXPECT_EQ(run(y), n - 1) << n;
  }
  // +inf counts as the largest float: the earlier of the two wins either way round.
  std::vector<float> x(50, 1.0f);
  x[20] = kLargest;
  x[35] = kInf;
  EXPECT_EQ(run(x), 20);
  x[20] = kInf;
  x[35] = kLargest;
  EXPECT_EQ(run(x), 20);
  x[5] = kNaN;
  EXPECT_EQ(run(x), 20);
}

INSTANTIATE_TEST_SUITE_P(Isas, ArgmaxTest, ::testing::ValuesIn(isas()),
                         [](const auto& param_info) { return std::string(isa_name(param_info.param)); });

}  // namespace
}  // namespace mnemo::kernels

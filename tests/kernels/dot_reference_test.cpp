// vec_dot on every ISA against the float dot product of the dequantised operands: the quantised
// dot must compute exactly what the formats represent, up to float rounding.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <tuple>
#include <vector>

#include "kernel_test_util.h"

namespace mnemo::kernels {
namespace {

// Relative to sum |w * a|. Dequantisation rounds each element once (the K formats twice:
// d * scale, then * q - min), the dot products round once per block; all in single precision.
constexpr double kTolerance = 2e-6;

class DotVsDequantised : public ::testing::TestWithParam<std::tuple<DType, Isa>> {
 protected:
  DType type() const { return std::get<0>(GetParam()); }
  const TypeKernels* kernels() const { return type_kernels(type(), std::get<1>(GetParam())); }
};

void expect_matches_float_dot(const TypeKernels* kernels, int64_t n, const std::vector<uint8_t>& w,
                              const std::vector<uint8_t>& a) {
  const testing::DotReference ref =
      testing::float_dot(testing::to_floats(kernels->type, w.data(), n), testing::to_floats(kernels->vec_dot_type, a.data(), n));
  const double slack = testing::q8_1_sum_rounding(kernels->type, w.data(), a.data(), n);
  const float actual = kernels->vec_dot(n, w.data(), a.data());
  ASSERT_LE(std::fabs(actual - ref.dot), kTolerance * ref.magnitude + slack)
      << "n=" << n << " dot=" << actual << " float reference=" << ref.dot << " magnitude=" << ref.magnitude;
}

TEST_P(DotVsDequantised, RandomBitPatterns) {
  std::mt19937 rng(31);
  for (int64_t n : testing::test_lengths(type())) {
    for (int trial = 0; trial < 10; ++trial) {
      expect_matches_float_dot(kernels(), n, testing::random_weight_row(type(), n, rng),
                               testing::random_activation_row(type(), n, rng));
    }
  }
}

TEST_P(DotVsDequantised, QuantisedRealisticWeights) {
  std::mt19937 rng(32);
  for (int64_t n : testing::test_lengths(type())) {
    const std::vector<float> weights = testing::random_floats(n, rng, 0.05f);
    std::vector<uint8_t> w(row_bytes(type(), n));
    type_kernels(type(), Isa::kScalar)->from_float(weights.data(), w.data(), n);
    expect_matches_float_dot(kernels(), n, w, testing::random_activation_row(type(), n, rng));
  }
}

// The whole pipeline against plain floats: error bounded by the two quantisations.
TEST_P(DotVsDequantised, ApproximatesTheUnquantisedDot) {
  std::mt19937 rng(33);
  const int64_t n = 4096;
  const std::vector<float> weights = testing::random_floats(n, rng, 0.05f);
  std::vector<float> activations;
  std::vector<uint8_t> w(row_bytes(type(), n));
  type_kernels(type(), Isa::kScalar)->from_float(weights.data(), w.data(), n);
  const std::vector<uint8_t> a = testing::random_activation_row(type(), n, rng, &activations);
  const testing::DotReference exact = testing::float_dot(weights, activations);
  const float actual = kernels()->vec_dot(n, w.data(), a.data());
  // 4-bit weights carry ~5% relative error per element, spread randomly: the sum keeps well
  // under 2% of sum |w * a|; Q2_K's four levels about three times that error, under 4%. Wrong
  // layouts or scales are off by far more.
  const double tolerance = type() == DType::Q2_K ? 0.04 : 0.02;
  EXPECT_LE(std::fabs(actual - exact.dot), tolerance * exact.magnitude) << "dot=" << actual << " exact=" << exact.dot;
}

std::vector<std::tuple<DType, Isa>> weight_types_on_all_isas() {
  std::vector<std::tuple<DType, Isa>> params;
  for (DType type : testing::weight_types()) {
    for (Isa isa : testing::supported_isas()) params.emplace_back(type, isa);
  }
  return params;
}

INSTANTIATE_TEST_SUITE_P(Kernels, DotVsDequantised, ::testing::ValuesIn(weight_types_on_all_isas()),
                         [](const auto& test_info) {
                           return testing::type_isa_name(std::get<0>(test_info.param), std::get<1>(test_info.param));
                         });

}  // namespace
}  // namespace mnemo::kernels

// Every SIMD variant against the scalar reference, for every type: dot products within a tight
// relative tolerance (only the order of float additions may differ), conversions bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <sstream>
#include <tuple>
#include <vector>

#include "kernel_test_util.h"

namespace mnemo::kernels {
namespace {

using testing::DotReference;

// Relative to sum |w * a|. The integer part of every quantised dot is exact; what remains is the
// rounding of a few hundred float additions in a different order.
constexpr double kDotTolerance = 1e-6;

class SimdVsScalar : public ::testing::TestWithParam<std::tuple<DType, Isa>> {
 protected:
  DType type() const { return std::get<0>(GetParam()); }
  Isa isa() const { return std::get<1>(GetParam()); }
  const TypeKernels* simd() const { return type_kernels(type(), isa()); }
  const TypeKernels* scalar() const { return type_kernels(type(), Isa::kScalar); }
};

class SimdDotVsScalar : public SimdVsScalar {};

TEST_P(SimdDotVsScalar, VecDotAgreesWithScalar) {
  std::mt19937 rng(1234);
  double worst = 0.0;
  for (int64_t n : testing::test_lengths(type())) {
    for (int trial = 0; trial < 20; ++trial) {
      const std::vector<uint8_t> w = testing::random_weight_row(type(), n, rng);
      const std::vector<uint8_t> a = testing::random_activation_row(type(), n, rng);
      const float expected = scalar()->vec_dot(n, w.data(), a.data());
      const float actual = simd()->vec_dot(n, w.data(), a.data());
      const DotReference ref = testing::float_dot(testing::to_floats(type(), w.data(), n),
                                                  testing::to_floats(scalar()->vec_dot_type, a.data(), n));
      ASSERT_GT(ref.magnitude, 0.0);
      const double error = std::fabs(static_cast<double>(actual) - expected) / ref.magnitude;
      worst = std::max(worst, error);
      ASSERT_LE(error, kDotTolerance) << "n=" << n << " trial=" << trial << " scalar=" << expected
                                      << " simd=" << actual;
    }
  }
  std::ostringstream worst_text;
  worst_text << worst;
  RecordProperty("worst_relative_error", worst_text.str());
}

// A corrupted activation or weight block must show: flipping one level changes the result.
TEST_P(SimdDotVsScalar, VecDotSeesEveryBlock) {
  std::mt19937 rng(99);
  const int64_t n = testing::test_lengths(type()).back();
  std::vector<uint8_t> w = testing::random_weight_row(type(), n, rng);
  std::vector<float> floats;
  std::vector<uint8_t> a = testing::random_activation_row(type(), n, rng, &floats);
  const float before = simd()->vec_dot(n, w.data(), a.data());
  // Zero the last activation block through the scalar quantiser and expect a change.
  const int64_t block = testing::block_elems(scalar()->vec_dot_type);
  for (int64_t i = n - block; i < n; ++i) floats[static_cast<size_t>(i)] = 0.0f;
  type_kernels(scalar()->vec_dot_type, Isa::kScalar)->from_float(floats.data(), a.data(), n);
  const float after = simd()->vec_dot(n, w.data(), a.data());
  EXPECT_NE(before, after);
  EXPECT_NEAR(after, scalar()->vec_dot(n, w.data(), a.data()),
              1e-5 * std::fabs(static_cast<double>(after)) + 1e-6);
}

TEST_P(SimdVsScalar, ToFloatIsBitIdentical) {
  std::mt19937 rng(7);
  for (int64_t n : testing::test_lengths(type())) {
    std::vector<uint8_t> row;
    if (scalar()->vec_dot == nullptr) {  // activation formats: make them with their quantiser
      const std::vector<float> values = testing::random_floats(n, rng);
      row.resize(row_bytes(type(), n));
      scalar()->from_float(values.data(), row.data(), n);
    } else {
      row = testing::random_weight_row(type(), n, rng);
    }
    std::vector<float> expected(static_cast<size_t>(n)), actual(static_cast<size_t>(n));
    scalar()->to_float(row.data(), expected.data(), n);
    simd()->to_float(row.data(), actual.data(), n);
    ASSERT_EQ(0, std::memcmp(expected.data(), actual.data(), expected.size() * sizeof(float))) << "n=" << n;
  }
}

TEST_P(SimdVsScalar, FromFloatIsBitIdentical) {
  std::mt19937 rng(8);
  for (int64_t n : testing::test_lengths(type())) {
    const std::vector<float> values = testing::random_floats(n, rng);
    std::vector<uint8_t> expected(row_bytes(type(), n)), actual(row_bytes(type(), n));
    scalar()->from_float(values.data(), expected.data(), n);
    simd()->from_float(values.data(), actual.data(), n);
    ASSERT_EQ(expected, actual) << "n=" << n;
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, SimdVsScalar,
                         ::testing::Combine(::testing::ValuesIn(testing::all_kernel_types()),
                                            ::testing::ValuesIn(testing::supported_simd_isas())),
                         [](const auto& test_info) {
                           return testing::type_isa_name(std::get<0>(test_info.param), std::get<1>(test_info.param));
                         });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(SimdVsScalar);

INSTANTIATE_TEST_SUITE_P(Kernels, SimdDotVsScalar,
                         ::testing::Combine(::testing::ValuesIn(testing::weight_types()),
                                            ::testing::ValuesIn(testing::supported_simd_isas())),
                         [](const auto& test_info) {
                           return testing::type_isa_name(std::get<0>(test_info.param), std::get<1>(test_info.param));
                         });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(SimdDotVsScalar);

// ---- Activation quantisers

// ggml's SIMD Q8_0 quantiser, written out plainly: scale by 127/amax, round half to even.
void ggml_simd_q8_0(const float* x, BlockQ8_0& block) {
  float amax = 0.0f;
  for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
  block.d = fp32_to_fp16(amax / 127.0f);
  const float inverse = amax != 0.0f ? 127.0f / amax : 0.0f;
  for (int j = 0; j < kQK; ++j) block.qs[j] = static_cast<int8_t>(std::nearbyint(x[j] * inverse));
}

class ActivationQuantiser : public ::testing::TestWithParam<Isa> {};

TEST_P(ActivationQuantiser, Q8_0FollowsGgmlSimdRounding) {
  std::mt19937 rng(11);
  const int64_t n = 4096;
  std::vector<float> values = testing::random_floats(n, rng);
  // Exact ties: in a block whose amax is 127, x * 127/amax = x, and x.5 rounds to even.
  for (int j = 0; j < kQK; ++j) values[static_cast<size_t>(j)] = static_cast<float>(j) - 15.5f;
  values[kQK - 1] = 127.0f;
  std::vector<BlockQ8_0> actual(n / kQK), expected(n / kQK);
  type_kernels(DType::Q8_0, GetParam())->quantize_activations(values.data(), actual.data(), n);
  for (int64_t b = 0; b < n / kQK; ++b) ggml_simd_q8_0(values.data() + b * kQK, expected[b]);
  ASSERT_EQ(0, std::memcmp(actual.data(), expected.data(), actual.size() * sizeof(BlockQ8_0)));
  EXPECT_EQ(actual[0].qs[0], -16);  // -15.5 -> -16 (even)
  EXPECT_EQ(actual[0].qs[1], -14);  // -14.5 -> -14
}

TEST_P(ActivationQuantiser, Q8_1SumsMatchLevels) {
  std::mt19937 rng(12);
  const int64_t n = 1024;
  const std::vector<float> values = testing::random_floats(n, rng);
  std::vector<BlockQ8_1> q8_1(n / kQK);
  std::vector<BlockQ8_0> q8_0(n / kQK);
  type_kernels(DType::Q8_1, GetParam())->quantize_activations(values.data(), q8_1.data(), n);
  type_kernels(DType::Q8_0, GetParam())->quantize_activations(values.data(), q8_0.data(), n);
  for (int64_t b = 0; b < n / kQK; ++b) {
    ASSERT_EQ(q8_1[b].d, q8_0[b].d);
    ASSERT_EQ(0, std::memcmp(q8_1[b].qs, q8_0[b].qs, kQK));
    int sum = 0;
    for (int j = 0; j < kQK; ++j) sum += q8_1[b].qs[j];
    float amax = 0.0f;
    for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(values[static_cast<size_t>(b * kQK + j)]));
    EXPECT_EQ(q8_1[b].s, fp32_to_fp16(static_cast<float>(sum) * (amax / 127.0f))) << "block " << b;
  }
}

TEST_P(ActivationQuantiser, Q8_KIsTheReference) {
  std::mt19937 rng(13);
  const int64_t n = 4096;
  std::vector<float> values = testing::random_floats(n, rng);
  // Ties on the extreme: the first element of largest magnitude sets the sign of the scale.
  values[5] = 40.0f;
  values[9] = -40.0f;
  values[256 + 3] = -40.0f;
  values[256 + 200] = 40.0f;
  std::fill(values.begin() + 512, values.begin() + 768, 0.0f);  // an all-zero block
  std::vector<BlockQ8_K> expected(n / kQKK), actual(n / kQKK);
  type_kernels(DType::Q8_K, Isa::kScalar)->from_float(values.data(), expected.data(), n);
  type_kernels(DType::Q8_K, GetParam())->quantize_activations(values.data(), actual.data(), n);
  ASSERT_EQ(0, std::memcmp(expected.data(), actual.data(), expected.size() * sizeof(BlockQ8_K)));
  EXPECT_EQ(actual[0].qs[5], -127);
  EXPECT_EQ(actual[1].qs[3], -127);
}

TEST_P(ActivationQuantiser, SimdQuantisersAgreeAcrossIsas) {
  std::mt19937 rng(14);
  const int64_t n = 2048;
  const std::vector<float> values = testing::random_floats(n, rng);
  for (DType type : {DType::Q8_0, DType::Q8_1, DType::Q8_K, DType::F16, DType::BF16}) {
    std::vector<uint8_t> avx2(row_bytes(type, n)), other(row_bytes(type, n));
    type_kernels(type, Isa::kAvx2)->quantize_activations(values.data(), avx2.data(), n);
    type_kernels(type, GetParam())->quantize_activations(values.data(), other.data(), n);
    EXPECT_EQ(avx2, other) << dtype_name(type);
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, ActivationQuantiser, ::testing::ValuesIn(testing::supported_simd_isas()),
                         [](const auto& test_info) { return std::string(isa_name(test_info.param)); });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(ActivationQuantiser);

}  // namespace
}  // namespace mnemo::kernels

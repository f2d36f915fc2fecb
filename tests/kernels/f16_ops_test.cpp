// The F16 primitives (f16_ops.h): each SIMD variant against the scalar reference, bit for bit
// where the arithmetic is the same (conversions, GeGLU's table) and within rounding where the
// order of a sum differs (dot products).
#include "kernels/nn/f16_ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/nn/ops.h"
#include "util/fp16.h"

namespace mnemo::kernels {
namespace {

std::vector<float> random_floats(int64_t n, std::mt19937& rng, float scale) {
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = normal(rng);
  return v;
}

class F16OpsTest : public ::testing::TestWithParam<Isa> {
 protected:
  const F16Ops& simd() const { return f16_ops(GetParam()); }
  const F16Ops& scalar() const { return f16_ops(Isa::kScalar); }
};

TEST_P(F16OpsTest, ConversionIsBitIdenticalToTheReference) {
  std::mt19937 rng(1);
  for (int64_t n : {1, 7, 8, 9, 100, 1000}) {
    std::vector<float> x = random_floats(n - 1, rng, 100.0f);
    x.push_back(65520.0f);  // rounds to infinity
    std::vector<uint16_t> a(static_cast<size_t>(n)), b(static_cast<size_t>(n));
    simd().to_f16(x.data(), a.data(), n);
    scalar().to_f16(x.data(), b.data(), n);
    EXPECT_EQ(a, b) << n;
    std::vector<float> back_simd(x.size()), back_scalar(x.size());
    simd().from_f16(a.data(), back_simd.data(), n);
    scalar().from_f16(a.data(), back_scalar.data(), n);
    EXPECT_EQ(std::memcmp(back_simd.data(), back_scalar.data(), x.size() * sizeof(float)), 0) << n;
  }
}

TEST_P(F16OpsTest, DotAndAxpyMatchTheReference) {
  std::mt19937 rng(2);
  for (int64_t n : {1, 15, 16, 17, 64, 256, 1000}) {
    const std::vector<float> a = random_floats(n, rng, 1.0f);
    std::vector<uint16_t> b(static_cast<size_t>(n));
    scalar().to_f16(random_floats(n, rng, 1.0f).data(), b.data(), n);
    double magnitude = 0.0;
    for (int64_t i = 0; i < n; ++i) magnitude += std::fabs(a[static_cast<size_t>(i)] * fp16_to_fp32(b[static_cast<size_t>(i)]));
    EXPECT_NEAR(simd().dot_f32_f16(a.data(), b.data(), n), scalar().dot_f32_f16(a.data(), b.data(), n), 1e-6 * magnitude + 1e-30) << n;
    std::vector<float> acc_simd = random_floats(n, rng, 1.0f), acc_scalar = acc_simd;
    simd().axpy_f16(0.75f, b.data(), acc_simd.data(), n);
    scalar().axpy_f16(0.75f, b.data(), acc_scalar.data(), n);
    for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(acc_simd[static_cast<size_t>(i)], acc_scalar[static_cast<size_t>(i)], 1e-6f) << n;
  }
}

TEST_P(F16OpsTest, GegluTableIsBitIdenticalToTheReferenceForEveryHalf) {
  // A table with distinct entries, so a wrong lookup cannot go unnoticed.
  std::vector<uint16_t> table(65536);
  for (uint32_t i = 0; i < table.size(); ++i) table[i] = fp32_to_fp16(std::tanh(fp16_to_fp32(static_cast<uint16_t>(i))) * 3.0f);
  std::vector<float> gate, up;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> uniform(-2.0f, 2.0f);
  for (uint32_t i = 0; i < 65536; ++i) {
    const float g = fp16_to_fp32(static_cast<uint16_t>(i));
    if (std::isnan(g)) continue;
    gate.push_back(g);
    gate.push_back(g * 1.0003f);  // values between halves, rounded to one
    up.push_back(uniform(rng));
    up.push_back(uniform(rng));
  }
  for (float edge : {-10.0f, 10.0f, -9.999f, 9.999f, -10.001f, 10.001f, 0.0f, -0.0f}) {
    gate.push_back(edge);
    up.push_back(1.5f);
  }
  const int64_t n = static_cast<int64_t>(gate.size());
  std::vector<float> a(gate.size()), b(gate.size());
  simd().geglu_table(table.data(), gate.data(), up.data(), a.data(), n);
  scalar().geglu_table(table.data(), gate.data(), up.data(), b.data(), n);
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
}

INSTANTIATE_TEST_SUITE_P(Kernels, F16OpsTest, ::testing::ValuesIn([] {
                           std::vector<Isa> isas;
                           for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
                             if (isa_supported(isa)) isas.push_back(isa);
                           }
                           return isas;
                         }()),
                         [](const auto& param_info) { return std::string(isa_name(param_info.param)); });

TEST(NnOps, SumOfSquaresMatchesTheReference) {
  std::mt19937 rng(5);
  const SumOfSquaresFn reference = sum_of_squares_kernel(Isa::kScalar);
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
    if (!isa_supported(isa)) continue;
    const SumOfSquaresFn simd = sum_of_squares_kernel(isa);
    for (int64_t n : {1, 15, 16, 17, 256, 640, 2049}) {
      const std::vector<float> x = random_floats(n, rng, 30.0f);
      const double want = reference(x.data(), n);
      EXPECT_NEAR(simd(x.data(), n), want, 1e-13 * want) << n;
    }
  }
}

TEST(NnOps, GegluIsGeluTanhTimesUp) {
  // Through ggml's F16 table: within F16 rounding of the exact GELU.
  std::mt19937 rng(4);
  const std::vector<float> gate = random_floats(1000, rng, 3.0f);
  const std::vector<float> up = random_floats(1000, rng, 1.0f);
  std::vector<float> out(gate.size());
  geglu(gate.data(), up.data(), out.data(), static_cast<int64_t>(gate.size()));
  for (size_t i = 0; i < gate.size(); ++i) {
    const float g = gate[i];
    const float gelu = 0.5f * g * (1.0f + std::tanh(0.7978845608f * g * (1.0f + 0.044715f * g * g)));
    EXPECT_NEAR(out[i], gelu * up[i], 2e-3f * std::fabs(up[i]) * (1.0f + std::fabs(g))) << g;
  }
}

}  // namespace
}  // namespace mnemo::kernels

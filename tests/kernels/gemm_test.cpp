// The GEMM kernels (gemm.h) of every ISA that has them, called directly, against the scalar
// reference dot product on the same quantised activations: random level bits (extremes
// included), row ranges that start and end inside a 16-row tile, the single-row and the batched
// paths, and no write outside the range asked for.
#include "kernels/cpu/gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernel_test_util.h"

namespace mnemo::kernels {
namespace {

struct Case {
  DType type;
  Isa isa;
};

std::vector<Case> cases() {
  std::vector<Case> out;
  for (Isa isa : testing::supported_isas()) {
    for (DType type : testing::weight_types()) {
      if (gemm_kernel(type, isa) != nullptr) out.push_back({type, isa});
    }
  }
  return out;
}

class GemmTest : public ::testing::TestWithParam<Case> {};

TEST_P(GemmTest, MatchesTheScalarReference) {
  const auto [type, isa] = GetParam();
  const GemmKernel* gemm = gemm_kernel(type, isa);
  const TypeKernels* scalar = type_kernels(type, Isa::kScalar);
  // The activations as the ISA quantises them (the packer must give the same values).
  const TypeKernels* quantizer = type_kernels(scalar->vec_dot_type, isa);
  std::mt19937 rng(90);
  const int64_t block = std::max<int64_t>(testing::block_elems(type), 32);
  for (const int64_t k : {block, 3 * block, 20 * block}) {
    const int64_t out = 45;
    std::vector<uint8_t> weights;
    for (int64_t o = 0; o < out; ++o) {
      const std::vector<uint8_t> row = testing::random_weight_row(type, k, rng);
      weights.insert(weights.end(), row.begin(), row.end());
    }
    const size_t weight_row_bytes = row_bytes(type, k);
    for (const int64_t n_rows : {1, 2, 9}) {
      const std::vector<float> x = testing::random_floats(k * n_rows, rng);
      const size_t packed_bytes = gemm->packer->row_bytes(k);
      ASSERT_EQ(packed_bytes % 64, 0u);
      std::vector<uint8_t> storage(packed_bytes * static_cast<size_t>(n_rows) + 64);
      uint8_t* packed = storage.data() + (64 - reinterpret_cast<uintptr_t>(storage.data()) % 64) % 64;
      for (int64_t r = 0; r < n_rows; ++r) gemm->packer->pack(x.data() + r * k, k, packed + static_cast<size_t>(r) * packed_bytes);
      std::vector<float> y(static_cast<size_t>(out * n_rows), NAN);
      const int64_t begin = 5, end = out - 3;  // partial tiles at both ends
      gemm->multiply({weights.data(), weight_row_bytes, k, begin, end, packed, packed_bytes, n_rows, y.data(), out});

      std::vector<uint8_t> a(row_bytes(scalar->vec_dot_type, k));
      for (int64_t r = 0; r < n_rows; ++r) {
        if (scalar->vec_dot_type == DType::F32) {
          std::memcpy(a.data(), x.data() + r * k, a.size());
        } else {
          quantizer->quantize_activations(x.data() + r * k, a.data(), k);
        }
        const std::vector<float> a_floats = testing::to_floats(scalar->vec_dot_type, a.data(), k);
        for (int64_t o = 0; o < out; ++o) {
          const float got = y[static_cast<size_t>(r * out + o)];
          if (o < begin || o >= end) {
            ASSERT_TRUE(std::isnan(got)) << "wrote outside the range: row " << o;
            continue;
          }
          const uint8_t* w = weights.data() + static_cast<size_t>(o) * weight_row_bytes;
          const float want = scalar->vec_dot(k, w, a.data());
          const testing::DotReference ref = testing::float_dot(testing::to_floats(type, w, k), a_floats);
          ASSERT_NEAR(got, want, 1e-5 * ref.magnitude + 1e-30)
              << "k " << k << ", rows " << n_rows << ", activation row " << r << ", weight row " << o;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, GemmTest, ::testing::ValuesIn(cases()), [](const auto& param_info) {
  return testing::type_isa_name(param_info.param.type, param_info.param.isa);
});
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(GemmTest);

TEST(Gemm, DispatchFollowsTheIsa) {
  for (DType type : testing::weight_types()) {
    EXPECT_EQ(gemm_kernel(type, Isa::kScalar), nullptr);
    EXPECT_EQ(gemm_kernel(type, Isa::kAvx2), nullptr);
    if (isa_supported(Isa::kAvx512)) {
      EXPECT_NE(gemm_kernel(type, Isa::kAvx512), nullptr) << dtype_name(type);
    }
  }
  EXPECT_EQ(gemm_kernel(DType::Q8_1, Isa::kAvx512), nullptr);  // activation formats have none
  EXPECT_EQ(gemm_kernel(DType::Q8_K, Isa::kAvx512), nullptr);
}

}  // namespace
}  // namespace mnemo::kernels

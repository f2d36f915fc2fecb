// The GEMM kernels (gemm.h) of every ISA that has them, called directly, against the scalar
// reference dot product on the same quantised activations: random level bits (extremes
// included), row ranges that start and end inside a 16-row tile and span several groups of
// tiles, the single-row and the batched paths, and no write outside the range asked for. Kernels that can repack a matrix once at load
// give the same bits from those tiles.
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
    const int64_t out = 150;  // ten 16-row tiles: more than one group of them (kGroupTiles)
    std::vector<uint8_t> weights;
    for (int64_t o = 0; o < out; ++o) {
      const std::vector<uint8_t> row = testing::random_weight_row(type, k, rng);
      weights.insert(weights.end(), row.begin(), row.end());
    }
    const size_t weight_row_bytes = row_bytes(type, k);
    for (const int64_t n_rows : {1, 2, 9, 19, 40}) {  // 40: ten chunks of four (AVX2)
      const std::vector<float> x = testing::random_floats(k * n_rows, rng);
      const size_t packed_bytes = gemm->packer->batch_bytes(k, n_rows);
      ASSERT_EQ(packed_bytes % 64, 0u);
      std::vector<uint8_t> storage(packed_bytes + 64);
      uint8_t* packed = storage.data() + (64 - reinterpret_cast<uintptr_t>(storage.data()) % 64) % 64;
      // Rows packed out of order: each writes only its own bytes.
      for (int64_t r = n_rows - 1; r >= 0; --r) gemm->packer->pack(x.data() + r * k, k, r, n_rows, packed);
      std::vector<float> y(static_cast<size_t>(out * n_rows), NAN);
      const int64_t begin = 5, end = out - 3;  // partial tiles at both ends
      gemm->multiply({weights.data(), weight_row_bytes, nullptr, k, begin, end, packed, n_rows, y.data(), out});
      if (gemm->pack_tile != nullptr) {
        // Tiles packed once: the same bits, for a range starting on a tile boundary (read from
        // the tiles) and for one that does not (the kernel repacks then).
        const size_t tile_bytes = gemm->tile_bytes(k);
        const int64_t n_tiles = (out + gemm->tile_rows - 1) / gemm->tile_rows;
        std::vector<uint8_t> tile_storage(tile_bytes * static_cast<size_t>(n_tiles) + 64);
        uint8_t* tiles = tile_storage.data() + (64 - reinterpret_cast<uintptr_t>(tile_storage.data()) % 64) % 64;
        for (int64_t t = 0; t < n_tiles; ++t) {
          gemm->pack_tile(weights.data(), weight_row_bytes, k, t * gemm->tile_rows, out, tiles + static_cast<size_t>(t) * tile_bytes);
        }
        for (const int64_t from : {begin, int64_t{0}, int64_t{gemm->tile_rows}}) {
          std::vector<float> from_tiles(y.size(), NAN), repacked(y.size(), NAN);
          gemm->multiply({weights.data(), weight_row_bytes, tiles, k, from, end, packed, n_rows, from_tiles.data(), out});
          gemm->multiply({weights.data(), weight_row_bytes, nullptr, k, from, end, packed, n_rows, repacked.data(), out});
          for (size_t i = 0; i < y.size(); ++i) {
            const int64_t o = static_cast<int64_t>(i) % out;
            if (o < from || o >= end) {
              ASSERT_TRUE(std::isnan(from_tiles[i])) << "wrote outside the range: row " << o;
            } else {
              ASSERT_EQ(std::memcmp(&from_tiles[i], &repacked[i], sizeof(float)), 0)
                  << "k " << k << ", rows " << n_rows << ", from " << from << ", element " << i;
            }
          }
        }
      }

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
    // Every quantised weight format has an AVX2 kernel; the float types use vec_dot there.
    const bool quantised = type != DType::F32 && type != DType::F16 && type != DType::BF16;
    if (isa_supported(Isa::kAvx2) && quantised) {
      EXPECT_NE(gemm_kernel(type, Isa::kAvx2), nullptr);
    } else {
      EXPECT_EQ(gemm_kernel(type, Isa::kAvx2), nullptr) << dtype_name(type);
    }
    if (isa_supported(Isa::kAvx512)) {
      EXPECT_NE(gemm_kernel(type, Isa::kAvx512), nullptr) << dtype_name(type);
    }
  }
  EXPECT_EQ(gemm_kernel(DType::Q8_1, Isa::kAvx512), nullptr);  // activation formats have none
  EXPECT_EQ(gemm_kernel(DType::Q8_K, Isa::kAvx512), nullptr);
}

}  // namespace
}  // namespace mnemo::kernels

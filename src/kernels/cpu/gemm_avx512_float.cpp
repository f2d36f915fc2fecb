// AVX-512 GEMM kernels of the float weight types (F32, F16, BF16) against activations of the
// same type, and their packers. Per (weight row, activation row) pair one accumulator vector:
// lane l sums, by FMA in order, the products of elements l, l + 16, l + 32, ... (the tail through
// masked loads), then a fixed tree adds the 16 lanes. A register tile of 4 weight rows and up to
// 4 activation rows shares the loads; the pair's arithmetic does not depend on the tile.
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/avx2_kernels.h"
#include "kernels/cpu/avx512_kernels.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_avx512_common.h"

namespace mnemo::kernels::avx512 {
namespace {

using gemm::round_up_64;

constexpr int kWeightRows = 4;  // per register tile
constexpr int kMaxActivationRows = 4;

// Activations are rows one after the other, each 64-byte aligned.
template <size_t kElementBytes>
size_t row_bytes(int64_t k) {
  return round_up_64(static_cast<size_t>(k) * kElementBytes);
}
template <size_t kElementBytes>
size_t batch_bytes(int64_t k, int64_t n_rows) {
  return static_cast<size_t>(n_rows) * row_bytes<kElementBytes>(k);
}
template <size_t kElementBytes>
uint8_t* row_in(void* batch, int64_t k, int64_t row) {
  return static_cast<uint8_t*>(batch) + static_cast<size_t>(row) * row_bytes<kElementBytes>(k);
}

void pack_f32(const float* x, int64_t k, int64_t row, int64_t, void* batch) {
  auto* dst = reinterpret_cast<float*>(row_in<4>(batch, k, row));
  for (int64_t i = 0; i < k; ++i) dst[i] = x[i];
}
void pack_f16(const float* x, int64_t k, int64_t row, int64_t, void* batch) {
  avx2::f16_from_float(x, row_in<2>(batch, k, row), k);
}
void pack_bf16(const float* x, int64_t k, int64_t row, int64_t, void* batch) {
  avx2::bf16_from_float(x, row_in<2>(batch, k, row), k);
}

// 16 elements (or the `mask`ed first ones, the rest zero) as floats.
struct F32Elements {
  static constexpr size_t kBytes = 4;
  static __m512 load(const void* p, int64_t i, __mmask16 mask) {
    return _mm512_maskz_loadu_ps(mask, static_cast<const float*>(p) + i);
  }
};
struct F16Elements {
  static constexpr size_t kBytes = 2;
  static __m512 load(const void* p, int64_t i, __mmask16 mask) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, static_cast<const uint16_t*>(p) + i));
  }
};
struct BF16Elements {
  static constexpr size_t kBytes = 2;
  static __m512 load(const void* p, int64_t i, __mmask16 mask) {
    const __m512i wide = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mask, static_cast<const uint16_t*>(p) + i));
    return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
  }
};

// The fixed reduction tree: halves, then quarters, then pairs.
float reduce(__m512 v) {
  const __m256 v8 = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  const __m128 v4 = _mm_add_ps(_mm256_castps256_ps128(v8), _mm256_extractf128_ps(v8, 1));
  const __m128 v2 = _mm_add_ps(v4, _mm_movehl_ps(v4, v4));
  return _mm_cvtss_f32(_mm_add_ss(v2, _mm_movehdup_ps(v2)));
}

template <class Elements, int kRows>
void multiply_tile(const GemmArgs& args, int64_t o, int64_t first_row) {
  const int valid = static_cast<int>(std::min<int64_t>(kWeightRows, args.row_end - o));
  const uint8_t* w[kWeightRows];
  for (int i = 0; i < kWeightRows; ++i) w[i] = args.weights + static_cast<size_t>(o + std::min(i, valid - 1)) * args.weight_row_bytes;
  const uint8_t* a[kRows];
  for (int j = 0; j < kRows; ++j) a[j] = args.activations + static_cast<size_t>(first_row + j) * row_bytes<Elements::kBytes>(args.k);
  __m512 acc[kWeightRows][kRows];
  for (auto& row : acc) {
    for (__m512& v : row) v = _mm512_setzero_ps();
  }
  for (int64_t i = 0; i < args.k; i += 16) {
    const __mmask16 mask = args.k - i >= 16 ? __mmask16(0xffff) : static_cast<__mmask16>((1u << (args.k - i)) - 1);
    __m512 x[kRows];
    for (int j = 0; j < kRows; ++j) x[j] = Elements::load(a[j], i, mask);
    for (int r = 0; r < kWeightRows; ++r) {
      const __m512 wv = Elements::load(w[r], i, mask);
      for (int j = 0; j < kRows; ++j) acc[r][j] = _mm512_fmadd_ps(wv, x[j], acc[r][j]);
    }
  }
  for (int r = 0; r < valid; ++r) {
    for (int j = 0; j < kRows; ++j) args.y[(first_row + j) * args.y_stride + o + r] = reduce(acc[r][j]);
  }
}

template <class Elements>
void multiply(const GemmArgs& args) {
  for (int64_t o = args.row_begin; o < args.row_end; o += kWeightRows) {
    int64_t j = 0;
    for (; j + kMaxActivationRows <= args.n_rows; j += kMaxActivationRows) multiply_tile<Elements, 4>(args, o, j);
    switch (args.n_rows - j) {
      case 1: multiply_tile<Elements, 1>(args, o, j); break;
      case 2: multiply_tile<Elements, 2>(args, o, j); break;
      case 3: multiply_tile<Elements, 3>(args, o, j); break;
      default: break;
    }
  }
}

static_assert(kMaxActivationRows == 4, "multiply lists the shorter chunks by hand");

}  // namespace

const ActivationPacker kPackF32{batch_bytes<4>, pack_f32};
const ActivationPacker kPackF16{batch_bytes<2>, pack_f16};
const ActivationPacker kPackBF16{batch_bytes<2>, pack_bf16};

const GemmKernel kGemmF32{&kPackF32, gemm::kTileRows, multiply<F32Elements>};
const GemmKernel kGemmF16{&kPackF16, gemm::kTileRows, multiply<F16Elements>};
const GemmKernel kGemmBF16{&kPackBF16, gemm::kTileRows, multiply<BF16Elements>};

}  // namespace mnemo::kernels::avx512

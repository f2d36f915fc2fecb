// AVX2 kernels of the 32-element block formats against Q8_0/Q8_1 activations, and the SIMD
// activation quantisers. Per block: an exact int32 dot product of the levels (8 lanes), then one
// FMA with the product of the two block scales.
#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/avx2_helpers.h"
#include "kernels/cpu/avx2_kernels.h"
#include "kernels/cpu/block_q8_1.h"
#include "tensor/quant_blocks.h"

namespace mnemo::kernels::avx2 {
namespace {

using simd::half_to_float;
using simd::load256;

// sum over blocks of term(b, acc), alternating two accumulators so that consecutive blocks'
// FMAs do not wait for each other.
template <class Term>
float accumulate_blocks(int64_t n_blocks, Term term) {
  __m256 acc0 = _mm256_setzero_ps();
  __m256 acc1 = _mm256_setzero_ps();
  int64_t b = 0;
  for (; b + 1 < n_blocks; b += 2) {
    acc0 = term(b, acc0);
    acc1 = term(b + 1, acc1);
  }
  if (b < n_blocks) acc0 = term(b, acc0);
  return simd::hsum(_mm256_add_ps(acc0, acc1));
}

// Levels in [0, 2^k) minus a fixed offset, dotted with signed activations: the offset's part is
// a second multiply-add of the activations, cheaper than making the levels signed.
__m256i dot_offset_levels(__m256i levels, __m256i offset, __m256i activations) {
  const __m256i pairs = _mm256_sub_epi16(_mm256_maddubs_epi16(levels, activations),
                                         _mm256_maddubs_epi16(offset, activations));
  return _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
}

__m256 fma_block(float scale, __m256i sums, __m256 acc) {
  return _mm256_fmadd_ps(_mm256_set1_ps(scale), _mm256_cvtepi32_ps(sums), acc);
}

// One Q8_0/Q8_1 block the way ggml's AVX2 quantiser makes it; returns the sum of its levels.
int quantize_block(const float* x, uint16_t& d_half, int8_t* qs, float& d_out) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 v[4];
  __m256 amax = _mm256_setzero_ps();
  for (int k = 0; k < 4; ++k) {
    v[k] = _mm256_loadu_ps(x + 8 * k);
    amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v[k]));
  }
  __m128 max4 = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
  max4 = _mm_max_ps(max4, _mm_movehl_ps(max4, max4));
  max4 = _mm_max_ss(max4, _mm_movehdup_ps(max4));
  const float max_abs = _mm_cvtss_f32(max4);

  const float d = max_abs / 127.0f;
  d_half = simd::float_to_half(d);
  d_out = d;
  const __m256 inverse = _mm256_set1_ps(max_abs != 0.0f ? 127.0f / max_abs : 0.0f);
  __m256i levels[4];
  for (int k = 0; k < 4; ++k) {
    const __m256 scaled = _mm256_round_ps(_mm256_mul_ps(v[k], inverse),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    levels[k] = _mm256_cvtps_epi32(scaled);
  }
  const __m256i sum = _mm256_add_epi32(_mm256_add_epi32(levels[0], levels[1]),
                                       _mm256_add_epi32(levels[2], levels[3]));
  // The packs interleave 128-bit lanes; the permutation puts the 32 bytes back in order.
  const __m256i words01 = _mm256_packs_epi32(levels[0], levels[1]);
  const __m256i words23 = _mm256_packs_epi32(levels[2], levels[3]);
  const __m256i bytes = _mm256_packs_epi16(words01, words23);
  const __m256i ordered = _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(qs), ordered);
  return simd::hsum(sum);
}

}  // namespace

float vec_dot_q4_0_q8_0(int64_t n, const void* w, const void* a) {
  const auto* wb = static_cast<const BlockQ4_0*>(w);
  const auto* ab = static_cast<const BlockQ8_0*>(a);
  const __m256i offset = _mm256_set1_epi8(8);
  return accumulate_blocks(n / kQK, [&](int64_t b, __m256 acc) {
    const __m256i sums = dot_offset_levels(simd::unpack_nibbles(wb[b].qs), offset, load256(ab[b].qs));
    return fma_block(half_to_float(wb[b].d) * half_to_float(ab[b].d), sums, acc);
  });
}

float vec_dot_q4_1_q8_1(int64_t n, const void* w, const void* a) {
  const auto* wb = static_cast<const BlockQ4_1*>(w);
  const auto* ab = static_cast<const BlockQ8_1*>(a);
  float min_terms = 0.0f;
  const float level_terms = accumulate_blocks(n / kQK, [&](int64_t b, __m256 acc) {
    min_terms += half_to_float(wb[b].m) * half_to_float(ab[b].s);
    const __m256i sums = simd::dot_u8_i8(simd::unpack_nibbles(wb[b].qs), load256(ab[b].qs));
    return fma_block(half_to_float(wb[b].d) * half_to_float(ab[b].d), sums, acc);
  });
  return level_terms + min_terms;
}

float vec_dot_q5_0_q8_0(int64_t n, const void* w, const void* a) {
  const auto* wb = static_cast<const BlockQ5_0*>(w);
  const auto* ab = static_cast<const BlockQ8_0*>(a);
  const __m256i offset = _mm256_set1_epi8(16);
  return accumulate_blocks(n / kQK, [&](int64_t b, __m256 acc) {
    const __m256i levels = simd::q5_levels(wb[b].qs, wb[b].qh);
    const __m256i sums = dot_offset_levels(levels, offset, load256(ab[b].qs));
    return fma_block(half_to_float(wb[b].d) * half_to_float(ab[b].d), sums, acc);
  });
}

float vec_dot_q5_1_q8_1(int64_t n, const void* w, const void* a) {
  const auto* wb = static_cast<const BlockQ5_1*>(w);
  const auto* ab = static_cast<const BlockQ8_1*>(a);
  float min_terms = 0.0f;
  const float level_terms = accumulate_blocks(n / kQK, [&](int64_t b, __m256 acc) {
    min_terms += half_to_float(wb[b].m) * half_to_float(ab[b].s);
    const __m256i sums = simd::dot_u8_i8(simd::q5_levels(wb[b].qs, wb[b].qh), load256(ab[b].qs));
    return fma_block(half_to_float(wb[b].d) * half_to_float(ab[b].d), sums, acc);
  });
  return level_terms + min_terms;
}

float vec_dot_q8_0_q8_0(int64_t n, const void* w, const void* a) {
  const auto* wb = static_cast<const BlockQ8_0*>(w);
  const auto* ab = static_cast<const BlockQ8_0*>(a);
  return accumulate_blocks(n / kQK, [&](int64_t b, __m256 acc) {
    const __m256i sums = simd::dot_i8_i8(load256(wb[b].qs), load256(ab[b].qs));
    return fma_block(half_to_float(wb[b].d) * half_to_float(ab[b].d), sums, acc);
  });
}

void q8_0_quantize_activations(const float* src, void* dst, int64_t n) {
  auto* blocks = static_cast<BlockQ8_0*>(dst);
  for (int64_t b = 0; b < n / kQK; ++b) {
    float d;
    quantize_block(src + b * kQK, blocks[b].d, blocks[b].qs, d);
  }
}

void q8_1_quantize_activations(const float* src, void* dst, int64_t n) {
  auto* blocks = static_cast<BlockQ8_1*>(dst);
  for (int64_t b = 0; b < n / kQK; ++b) {
    float d;
    const int sum = quantize_block(src + b * kQK, blocks[b].d, blocks[b].qs, d);
    blocks[b].s = simd::float_to_half(d * static_cast<float>(sum));
  }
}

}  // namespace mnemo::kernels::avx2

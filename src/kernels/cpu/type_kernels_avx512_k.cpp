// AVX-512 kernels of the K formats against Q8_K. A 512-bit register holds one 64-element run of
// levels (Q4_K/Q5_K: the low then the high nibbles of 32 bytes; Q6_K: two 32-element groups), so
// the activations are read in place. maddubs makes 16-bit pair sums, and VNNI's dpwssd weights
// them by the sub-block scales and accumulates in int32 in one instruction.
#include <immintrin.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cpu/avx2_helpers.h"
#include "kernels/cpu/avx512_kernels.h"
#include "kernels/cpu/k_scales.h"
#include "tensor/quant_blocks.h"

namespace mnemo::kernels::avx512 {
namespace {

using simd::load256;

constexpr int kChunks = kQKK / 64;

__m512i load512(const void* p) { return _mm512_loadu_si512(p); }

__m512i join(__m256i lo, __m256i hi) { return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1); }

// 32 words: `lo` in the first 16, `hi` in the last 16.
__m512i two_scales(int lo, int hi) {
  return join(_mm256_set1_epi16(static_cast<int16_t>(lo)), _mm256_set1_epi16(static_cast<int16_t>(hi)));
}

int dot_mins(const uint8_t* mins, const int16_t* bsums) {
  const __m128i mins8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(mins));
  const __m256i mins16 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mins8, mins8));
  return simd::hsum(_mm256_madd_epi16(load256(bsums), mins16));
}

template <class Block>
float affine_k_dot(int64_t n, const Block* wb, const BlockQ8_K* ab) {
  constexpr bool kHasFifthBit = std::is_same_v<Block, BlockQ5_K>;
  const __m512i low_mask = _mm512_set1_epi8(0x0f);
  __m512 acc = _mm512_setzero_ps();
  float min_terms = 0.0f;
  for (int64_t b = 0; b < n / kQKK; ++b) {
    uint8_t scales[kKSubBlocks];
    uint8_t mins[kKSubBlocks];
    unpack_k_scales(wb[b].scales, scales, mins);
    // Q5_K: bit 2c of qh[l] belongs to the low half of chunk c, bit 2c + 1 to the high half; the
    // pre-shifted copy in the upper 256 bits lines both up at bit 0 after c steps of two.
    [[maybe_unused]] __m512i high_bits = _mm512_setzero_si512();
    if constexpr (kHasFifthBit) {
      const __m256i qh = load256(wb[b].qh);
      high_bits = join(qh, _mm256_srli_epi16(qh, 1));
    }
    __m512i sums = _mm512_setzero_si512();
    for (int c = 0; c < kChunks; ++c) {
      const __m256i packed = load256(wb[b].qs + 32 * c);
      __m512i levels = _mm512_and_si512(join(packed, _mm256_srli_epi16(packed, 4)), low_mask);
      if constexpr (kHasFifthBit) {
        levels = _mm512_or_si512(levels, _mm512_slli_epi16(_mm512_and_si512(high_bits, _mm512_set1_epi8(1)), 4));
        high_bits = _mm512_srli_epi16(high_bits, 2);
      }
      const __m512i pairs = _mm512_maddubs_epi16(levels, load512(ab[b].qs + 64 * c));
      sums = _mm512_dpwssd_epi32(sums, pairs, two_scales(scales[2 * c], scales[2 * c + 1]));
    }
    const float d = simd::half_to_float(wb[b].d) * ab[b].d;
    const float dmin = simd::half_to_float(wb[b].dmin) * ab[b].d;
    acc = _mm512_fmadd_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(sums), acc);
    min_terms += dmin * static_cast<float>(dot_mins(mins, ab[b].bsums));
  }
  return _mm512_reduce_add_ps(acc) - min_terms;
}

}  // namespace

float vec_dot_q4_K_q8_K(int64_t n, const void* w, const void* a) {
  return affine_k_dot(n, static_cast<const BlockQ4_K*>(w), static_cast<const BlockQ8_K*>(a));
}

float vec_dot_q5_K_q8_K(int64_t n, const void* w, const void* a) {
  return affine_k_dot(n, static_cast<const BlockQ5_K*>(w), static_cast<const BlockQ8_K*>(a));
}

float vec_dot_q6_K_q8_K(int64_t n, const void* w, const void* a) {
  const auto* wb = static_cast<const BlockQ6_K*>(w);
  const auto* ab = static_cast<const BlockQ8_K*>(a);
  const __m512i low_mask = _mm512_set1_epi8(0x0f);
  const __m512i two_bits = _mm512_set1_epi8(0x03);
  // Word i of a group pair takes sub-block scale i / 8 (+ 4 per pair).
  const __m512i scale_index = _mm512_set_epi64(0x0003000300030003, 0x0003000300030003, 0x0002000200020002,
                                               0x0002000200020002, 0x0001000100010001, 0x0001000100010001, 0, 0);
  __m512 acc = _mm512_setzero_ps();
  for (int64_t b = 0; b < n / kQKK; ++b) {
    const __m256i scales16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wb[b].scales)));
    const __m512i scale_words = _mm512_castsi256_si512(scales16);
    __m512i sums = _mm512_setzero_si512();
    for (int half = 0; half < 2; ++half) {
      const __m512i ql = load512(wb[b].ql + 64 * half);
      const __m256i qh = load256(wb[b].qh + 32 * half);
      // Groups 0|1 take qh bits 0-1|2-3, groups 2|3 bits 4-5|6-7 (see q6_K_to_float).
      const __m512i qh_pair = join(qh, _mm256_srli_epi16(qh, 2));
      const __m512i levels01 = _mm512_or_si512(_mm512_and_si512(ql, low_mask),
                                               _mm512_slli_epi16(_mm512_and_si512(qh_pair, two_bits), 4));
      const __m512i levels23 =
          _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), low_mask),
                          _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(qh_pair, 4), two_bits), 4));
      const int8_t* q8 = ab[b].qs + 128 * half;
      const __m512i pairs01 = _mm512_maddubs_epi16(levels01, load512(q8));
      const __m512i pairs23 = _mm512_maddubs_epi16(levels23, load512(q8 + 64));
      const __m512i index01 = _mm512_add_epi16(scale_index, _mm512_set1_epi16(static_cast<int16_t>(8 * half)));
      const __m512i index23 = _mm512_add_epi16(index01, _mm512_set1_epi16(4));
      sums = _mm512_dpwssd_epi32(sums, pairs01, _mm512_permutexvar_epi16(index01, scale_words));
      sums = _mm512_dpwssd_epi32(sums, pairs23, _mm512_permutexvar_epi16(index23, scale_words));
    }
    // The levels were taken in [0, 64): remove 32 * scale * (sum of the sub-block's activations).
    const __m256i offset = _mm256_slli_epi32(_mm256_madd_epi16(load256(ab[b].bsums), scales16), 5);
    sums = _mm512_sub_epi32(sums, _mm512_zextsi256_si512(offset));
    const float d = simd::half_to_float(wb[b].d) * ab[b].d;
    acc = _mm512_fmadd_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(sums), acc);
  }
  return _mm512_reduce_add_ps(acc);
}

}  // namespace mnemo::kernels::avx512

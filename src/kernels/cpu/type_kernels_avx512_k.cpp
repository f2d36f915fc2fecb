// AVX-512 kernels of the K formats against Q8_K. maddubs makes 16-bit pair sums of levels times
// activations, and VNNI's dpwssd weights them by the sub-block scales and accumulates in int32 in
// one instruction. Q6_K works on 64-element runs in 512-bit registers; Q4_K/Q5_K measured faster
// in 256-bit ones on Zen 4 (whose 512-bit operations take two passes through 256-bit units).
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

int dot_mins(uint64_t mins, const int16_t* bsums) {
  const __m128i mins8 = _mm_cvtsi64_si128(static_cast<long long>(mins));
  const __m256i mins16 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mins8, mins8));
  return simd::hsum(_mm256_madd_epi16(load256(bsums), mins16));
}

// Per 32 elements: one maddubs, one dpwssd; Q5_K's fifth bits come in as byte masks.
template <class Block>
float affine_k_dot(int64_t n, const Block* wb, const BlockQ8_K* ab) {
  constexpr bool kHasFifthBit = std::is_same_v<Block, BlockQ5_K>;
  const __m256i low_mask = _mm256_set1_epi8(0x0f);
  __m256 acc = _mm256_setzero_ps();
  float min_terms = 0.0f;
  for (int64_t b = 0; b < n / kQKK; ++b) {
    uint64_t scales, mins;
    unpack_k_scales_words(wb[b].scales, scales, mins);
    // The eight scales as words in both 128-bit lanes; a byte shuffle then broadcasts one.
    const __m256i scale_words =
        _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<long long>(scales))));
    [[maybe_unused]] __m256i high_bits = _mm256_setzero_si256();
    if constexpr (kHasFifthBit) high_bits = load256(wb[b].qh);
    __m256i sums = _mm256_setzero_si256();
    __m256i sums_hi = _mm256_setzero_si256();  // a second dependency chain
    for (int c = 0; c < kChunks; ++c) {
      const __m256i packed = load256(wb[b].qs + 32 * c);
      __m256i lo = _mm256_and_si256(packed, low_mask);
      __m256i hi = _mm256_and_si256(_mm256_srli_epi16(packed, 4), low_mask);
      if constexpr (kHasFifthBit) {
        // Chunk c's fifth bits are bits 2c (low half) and 2c + 1 (high half) of qh[l].
        lo = _mm256_mask_add_epi8(lo, _mm256_test_epi8_mask(high_bits, _mm256_set1_epi8(1)), lo, _mm256_set1_epi8(16));
        hi = _mm256_mask_add_epi8(hi, _mm256_test_epi8_mask(high_bits, _mm256_set1_epi8(2)), hi, _mm256_set1_epi8(16));
        high_bits = _mm256_srli_epi16(high_bits, 2);
      }
      const __m256i scale_lo = _mm256_shuffle_epi8(scale_words, _mm256_set1_epi16(static_cast<int16_t>(0x0100 * (4 * c + 1) + 4 * c)));
      const __m256i scale_hi = _mm256_shuffle_epi8(scale_words, _mm256_set1_epi16(static_cast<int16_t>(0x0100 * (4 * c + 3) + 4 * c + 2)));
      sums = _mm256_dpwssd_epi32(sums, _mm256_maddubs_epi16(lo, load256(ab[b].qs + 64 * c)), scale_lo);
      sums_hi = _mm256_dpwssd_epi32(sums_hi, _mm256_maddubs_epi16(hi, load256(ab[b].qs + 64 * c + 32)), scale_hi);
    }
    sums = _mm256_add_epi32(sums, sums_hi);
    const float d = simd::half_to_float(wb[b].d) * ab[b].d;
    const float dmin = simd::half_to_float(wb[b].dmin) * ab[b].d;
    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sums), acc);
    min_terms += dmin * static_cast<float>(dot_mins(mins, ab[b].bsums));
  }
  return simd::hsum(acc) - min_terms;
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

// AVX2 kernels of the 2- and 3-bit K formats (Q2_K, Q3_K) against Q8_K activations. Per
// super-block the integer sum over the sixteen sub-blocks of 16 (each weighted by its scale)
// stays exact in int32 lanes; the levels are unsigned (Q3_K's carry +4, removed through the
// activations' per-16 sums), so maddubs takes them as they are.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/cpu/avx2_helpers.h"
#include "kernels/cpu/avx2_kernels.h"
#include "tensor/quant_blocks.h"

namespace mnemo::kernels::avx2 {
namespace {

using simd::load256;

// Scale-weighted sum of one run of 32 levels: the first 16 (the low 128 bits) weighted by
// `scale_lo`, the last 16 by `scale_hi`.
__m256i run_dot(__m256i levels, const int8_t* q8, int16_t scale_lo, int16_t scale_hi) {
  const __m256i products = _mm256_maddubs_epi16(levels, load256(q8));
  return _mm256_madd_epi16(products, _mm256_set_m128i(_mm_set1_epi16(scale_hi), _mm_set1_epi16(scale_lo)));
}

// Q3_K's sixteen 6-bit scale codes (see k_scales.h), minus 32, as int16.
__m256i q3_k_scales(const uint8_t* packed) {
  uint32_t aux[3];
  std::memcpy(aux, packed, sizeof(aux));
  constexpr uint32_t kLow4 = 0x0f0f0f0f, kLow2 = 0x03030303;
  const uint32_t codes[4] = {(aux[0] & kLow4) | ((aux[2] & kLow2) << 4), (aux[1] & kLow4) | (((aux[2] >> 2) & kLow2) << 4),
                             ((aux[0] >> 4) & kLow4) | (((aux[2] >> 4) & kLow2) << 4),
                             ((aux[1] >> 4) & kLow4) | (((aux[2] >> 6) & kLow2) << 4)};
  __m128i bytes;
  std::memcpy(&bytes, codes, sizeof(bytes));
  return _mm256_sub_epi16(_mm256_cvtepu8_epi16(bytes), _mm256_set1_epi16(32));
}

}  // namespace

float vec_dot_q2_K_q8_K(int64_t n, const void* w, const void* a) {
  const auto* wb = static_cast<const BlockQ2_K*>(w);
  const auto* ab = static_cast<const BlockQ8_K*>(a);
  const __m256i two_bits = _mm256_set1_epi8(3);
  float sum = 0.0f;
  for (int64_t b = 0; b < n / kQKK; ++b) {
    const uint8_t* scales = wb[b].scales;
    __m256i sums = _mm256_setzero_si256();
    for (int half = 0; half < 2; ++half) {
      const __m256i packed = load256(wb[b].qs + 32 * half);
      for (int j = 0; j < 4; ++j) {
        const int s = 8 * half + 2 * j;
        const __m256i levels = _mm256_and_si256(_mm256_srli_epi16(packed, 2 * j), two_bits);
        sums = _mm256_add_epi32(sums, run_dot(levels, ab[b].qs + 128 * half + 32 * j, static_cast<int16_t>(scales[s] & 0x0f),
                                              static_cast<int16_t>(scales[s + 1] & 0x0f)));
      }
    }
    const __m256i mins16 = _mm256_cvtepu8_epi16(_mm_srli_epi16(_mm_and_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(scales)),
                                                                            _mm_set1_epi8(static_cast<char>(0xf0))),
                                                               4));
    const int mins = simd::hsum(_mm256_madd_epi16(load256(ab[b].bsums), mins16));
    const float d = simd::half_to_float(wb[b].d) * ab[b].d;
    const float dmin = simd::half_to_float(wb[b].dmin) * ab[b].d;
    sum += d * static_cast<float>(simd::hsum(sums)) - dmin * static_cast<float>(mins);
  }
  return sum;
}

float vec_dot_q3_K_q8_K(int64_t n, const void* w, const void* a) {
  const auto* wb = static_cast<const BlockQ3_K*>(w);
  const auto* ab = static_cast<const BlockQ8_K*>(a);
  const __m256i two_bits = _mm256_set1_epi8(3);
  const __m256i one = _mm256_set1_epi8(1);
  float sum = 0.0f;
  for (int64_t b = 0; b < n / kQKK; ++b) {
    alignas(32) int16_t scales[16];
    const __m256i scales16 = q3_k_scales(wb[b].scales);
    _mm256_store_si256(reinterpret_cast<__m256i*>(scales), scales16);
    const __m256i high = load256(wb[b].hmask);
    __m256i sums = _mm256_setzero_si256();
    for (int half = 0; half < 2; ++half) {
      const __m256i packed = load256(wb[b].qs + 32 * half);
      for (int j = 0; j < 4; ++j) {
        const int s = 8 * half + 2 * j;
        // Levels q + 4 in [0, 8): the two low bits, and 4 where the third bit is set.
        const __m256i third = _mm256_and_si256(_mm256_srli_epi16(high, 4 * half + j), one);
        const __m256i levels = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(packed, 2 * j), two_bits),
                                               _mm256_slli_epi16(third, 2));
        sums = _mm256_add_epi32(sums, run_dot(levels, ab[b].qs + 128 * half + 32 * j, scales[s], scales[s + 1]));
      }
    }
    // The +4 of every level: 4 x sum over the sub-blocks of scale x the activations' sum.
    const __m256i offset = _mm256_slli_epi32(_mm256_madd_epi16(load256(ab[b].bsums), scales16), 2);
    const int total = simd::hsum(_mm256_sub_epi32(sums, offset));
    sum += simd::half_to_float(wb[b].d) * ab[b].d * static_cast<float>(total);
  }
  return sum;
}

}  // namespace mnemo::kernels::avx2

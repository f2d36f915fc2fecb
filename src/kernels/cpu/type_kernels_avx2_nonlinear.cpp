// AVX2 kernels of the table formats (IQ4_NL, IQ4_XS, MXFP4): a shuffle looks each 4-bit code up
// in the 16-entry level table, then the signed levels meet the activations as Q8_0's do. Each
// block's integer sum is exact.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/cpu/avx2_helpers.h"
#include "kernels/cpu/avx2_kernels.h"
#include "kernels/cpu/nonlinear_levels.h"
#include "tensor/quant_blocks.h"

namespace mnemo::kernels::avx2 {
namespace {

using simd::load256;

__m256i level_table(const int8_t* levels) {
  return _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(levels)));
}

// The 32 levels of a block's 16 bytes of codes, in element order.
__m256i levels_of(__m256i table, const uint8_t* qs) { return _mm256_shuffle_epi8(table, simd::unpack_nibbles(qs)); }

// A block of 32 with one scale against Q8_0 activations (IQ4_NL, MXFP4).
template <class Block, float (*kScale)(const Block&)>
float block32_dot(int64_t n, const Block* wb, const BlockQ8_0* ab, const int8_t* levels) {
  const __m256i table = level_table(levels);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < n / kQK; ++b) {
    const __m256i sums = simd::dot_i8_i8(levels_of(table, wb[b].qs), load256(ab[b].qs));
    const float d = kScale(wb[b]) * simd::half_to_float(ab[b].d);
    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sums), acc);
  }
  return simd::hsum(acc);
}

float iq4_nl_scale(const BlockIQ4_NL& b) { return simd::half_to_float(b.d); }
float mxfp4_scale(const BlockMXFP4& b) { return e8m0_half_to_float(b.e); }

}  // namespace

float vec_dot_iq4_nl_q8_0(int64_t n, const void* w, const void* a) {
  return block32_dot<BlockIQ4_NL, iq4_nl_scale>(n, static_cast<const BlockIQ4_NL*>(w), static_cast<const BlockQ8_0*>(a),
                                                kIq4nlLevels);
}

float vec_dot_mxfp4_q8_0(int64_t n, const void* w, const void* a) {
  return block32_dot<BlockMXFP4, mxfp4_scale>(n, static_cast<const BlockMXFP4*>(w), static_cast<const BlockQ8_0*>(a),
                                              kMxfp4Levels);
}

float vec_dot_iq4_xs_q8_K(int64_t n, const void* w, const void* a) {
  const auto* wb = static_cast<const BlockIQ4_XS*>(w);
  const auto* ab = static_cast<const BlockQ8_K*>(a);
  const __m256i table = level_table(kIq4nlLevels);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < n / kQKK; ++b) {
    __m256i sums = _mm256_setzero_si256();
    uint32_t high = wb[b].scales_h;
    for (int s = 0; s < kQKK / kQK; ++s, high >>= 2) {
      const int code = ((wb[b].scales_l[s / 2] >> (4 * (s % 2))) & 0x0f) | static_cast<int>((high & 3) << 4);
      const __m256i levels = levels_of(table, wb[b].qs + s * kQK / 2);
      const __m256i q8 = load256(ab[b].qs + s * kQK);
      // |level| x the activations with the level's sign: pairs of products fit int16 exactly.
      const __m256i pairs = _mm256_maddubs_epi16(_mm256_sign_epi8(levels, levels), _mm256_sign_epi8(q8, levels));
      sums = _mm256_add_epi32(sums, _mm256_madd_epi16(pairs, _mm256_set1_epi16(static_cast<int16_t>(code - 32))));
    }
    const float d = simd::half_to_float(wb[b].d) * ab[b].d;
    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sums), acc);
  }
  return simd::hsum(acc);
}

}  // namespace mnemo::kernels::avx2

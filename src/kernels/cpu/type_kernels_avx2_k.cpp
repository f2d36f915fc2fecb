// AVX2 kernels of the K formats against Q8_K activations, and the Q8_K quantiser. Per
// super-block the integer sum over all sub-blocks (each weighted by its scale) stays exact in
// int32 lanes; one FMA applies d. The mins (Q4_K/Q5_K) use the activations' per-16 sums.
#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/cpu/avx2_helpers.h"
#include "kernels/cpu/avx2_kernels.h"
#include "kernels/cpu/k_scales.h"
#include "tensor/quant_blocks.h"

namespace mnemo::kernels::avx2 {
namespace {

using simd::load256;

constexpr int kChunks = kQKK / 64;  // Q4_K/Q5_K: 32 bytes of nibbles per 64 elements

// sum_j bsums[j] * mins[j / 2]: the minimum of sub-block s times the sum of its activations.
int dot_mins(uint64_t mins, const int16_t* bsums) {
  const __m128i mins8 = _mm_cvtsi64_si128(static_cast<long long>(mins));
  const __m256i mins16 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mins8, mins8));
  return simd::hsum(_mm256_madd_epi16(load256(bsums), mins16));
}

// Scale-weighted dot of one chunk: the low half uses `scale_lo`, the high half `scale_hi`.
__m256i chunk_dot(__m256i lo, __m256i hi, const int8_t* q8, int scale_lo, int scale_hi) {
  const __m256i p_lo = _mm256_maddubs_epi16(lo, load256(q8));
  const __m256i p_hi = _mm256_maddubs_epi16(hi, load256(q8 + 32));
  return _mm256_add_epi32(_mm256_madd_epi16(p_lo, _mm256_set1_epi16(static_cast<int16_t>(scale_lo))),
                          _mm256_madd_epi16(p_hi, _mm256_set1_epi16(static_cast<int16_t>(scale_hi))));
}

// Q4_K and Q5_K differ only in Q5_K's fifth bits.
template <class Block>
float affine_k_dot(int64_t n, const Block* wb, const BlockQ8_K* ab) {
  constexpr bool kHasFifthBit = std::is_same_v<Block, BlockQ5_K>;
  const __m256i low_mask = _mm256_set1_epi8(0x0f);
  __m256 acc = _mm256_setzero_ps();
  float min_terms = 0.0f;
  for (int64_t b = 0; b < n / kQKK; ++b) {
    uint64_t scales, mins;
    unpack_k_scales_words(wb[b].scales, scales, mins);
    const int8_t* q8 = ab[b].qs;
    [[maybe_unused]] __m256i high_bits = _mm256_setzero_si256();
    if constexpr (kHasFifthBit) high_bits = load256(wb[b].qh);
    __m256i sums = _mm256_setzero_si256();
    for (int c = 0; c < kChunks; ++c) {
      const __m256i packed = load256(wb[b].qs + 32 * c);
      __m256i lo = _mm256_and_si256(packed, low_mask);
      __m256i hi = _mm256_and_si256(_mm256_srli_epi16(packed, 4), low_mask);
      if constexpr (kHasFifthBit) {
        // Chunk c's fifth bits are bits 2c (low half) and 2c + 1 (high half) of qh[l].
        const __m256i bit_lo = _mm256_and_si256(high_bits, _mm256_set1_epi8(1));
        const __m256i bit_hi = _mm256_and_si256(high_bits, _mm256_set1_epi8(2));
        lo = _mm256_or_si256(lo, _mm256_slli_epi16(bit_lo, 4));
        hi = _mm256_or_si256(hi, _mm256_slli_epi16(bit_hi, 3));
        high_bits = _mm256_srli_epi16(high_bits, 2);
      }
      const int scale_lo = static_cast<int>((scales >> (16 * c)) & 0xff);
      const int scale_hi = static_cast<int>((scales >> (16 * c + 8)) & 0xff);
      sums = _mm256_add_epi32(sums, chunk_dot(lo, hi, q8 + 64 * c, scale_lo, scale_hi));
    }
    const float d = simd::half_to_float(wb[b].d) * ab[b].d;
    const float dmin = simd::half_to_float(wb[b].dmin) * ab[b].d;
    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sums), acc);
    min_terms += dmin * static_cast<float>(dot_mins(mins, ab[b].bsums));
  }
  return simd::hsum(acc) - min_terms;
}

// Converts 32 int32 levels (4 vectors) to bytes in order.
__m256i pack_levels(const __m256i* levels) {
  const __m256i words01 = _mm256_packs_epi32(levels[0], levels[1]);
  const __m256i words23 = _mm256_packs_epi32(levels[2], levels[3]);
  const __m256i bytes = _mm256_packs_epi16(words01, words23);
  return _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
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
  const __m256i low_mask = _mm256_set1_epi8(0x0f);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < n / kQKK; ++b) {
    const int8_t* scales = wb[b].scales;
    __m256i sums = _mm256_setzero_si256();
    for (int half = 0; half < 2; ++half) {
      const __m256i ql0 = load256(wb[b].ql + 64 * half);
      const __m256i ql1 = load256(wb[b].ql + 64 * half + 32);
      const __m256i qh = load256(wb[b].qh + 32 * half);
      // Levels in [0, 64); the -32 offset is applied once per super-block below.
      const __m256i levels[4] = {
          _mm256_or_si256(_mm256_and_si256(ql0, low_mask),
                          _mm256_slli_epi16(_mm256_and_si256(qh, _mm256_set1_epi8(0x03)), 4)),
          _mm256_or_si256(_mm256_and_si256(ql1, low_mask),
                          _mm256_slli_epi16(_mm256_and_si256(qh, _mm256_set1_epi8(0x0c)), 2)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), low_mask),
                          _mm256_and_si256(qh, _mm256_set1_epi8(0x30))),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), low_mask),
                          _mm256_srli_epi16(_mm256_and_si256(qh, _mm256_set1_epi8(static_cast<char>(0xc0))), 2)),
      };
      for (int g = 0; g < 4; ++g) {
        const int s = 8 * half + 2 * g;  // the group's two sub-blocks of 16
        const __m256i products = _mm256_maddubs_epi16(levels[g], load256(ab[b].qs + 128 * half + 32 * g));
        const __m256i group_scales = _mm256_set_m128i(_mm_set1_epi16(scales[s + 1]), _mm_set1_epi16(scales[s]));
        sums = _mm256_add_epi32(sums, _mm256_madd_epi16(products, group_scales));
      }
    }
    const __m256i scales16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(scales)));
    const __m256i offset = _mm256_slli_epi32(_mm256_madd_epi16(load256(ab[b].bsums), scales16), 5);
    sums = _mm256_sub_epi32(sums, offset);
    const float d = simd::half_to_float(wb[b].d) * ab[b].d;
    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sums), acc);
  }
  return simd::hsum(acc);
}

void q8_K_from_float(const float* src, void* dst, int64_t n) {
  auto* blocks = static_cast<BlockQ8_K*>(dst);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t b = 0; b < n / kQKK; ++b, src += kQKK) {
    BlockQ8_K& block = blocks[b];
    __m256 amax8 = _mm256_setzero_ps();
    for (int j = 0; j < kQKK; j += 8) amax8 = _mm256_max_ps(amax8, _mm256_andnot_ps(sign, _mm256_loadu_ps(src + j)));
    __m128 max4 = _mm_max_ps(_mm256_castps256_ps128(amax8), _mm256_extractf128_ps(amax8, 1));
    max4 = _mm_max_ps(max4, _mm_movehl_ps(max4, max4));
    max4 = _mm_max_ss(max4, _mm_movehdup_ps(max4));
    const float amax = _mm_cvtss_f32(max4);
    if (amax == 0.0f) {
      std::memset(&block, 0, sizeof(block));
      continue;
    }
    // The scale's sign is that of the first element of largest magnitude (as the reference).
    float extreme = 0.0f;
    for (int j = 0; j < kQKK; j += 8) {
      const __m256 magnitude = _mm256_andnot_ps(sign, _mm256_loadu_ps(src + j));
      const int hits = _mm256_movemask_ps(_mm256_cmp_ps(magnitude, _mm256_set1_ps(amax), _CMP_EQ_OQ));
      if (hits != 0) {
        extreme = src[j + __builtin_ctz(static_cast<unsigned>(hits))];
        break;
      }
    }
    const float inverse_scale = -127.0f / extreme;
    const __m256 multiplier = _mm256_set1_ps(inverse_scale);
    const __m256i top = _mm256_set1_epi32(127);
    for (int j = 0; j < kQKK; j += 32) {
      __m256i levels[4];
      for (int k = 0; k < 4; ++k) {
        // cvtps rounds half to even (the default MXCSR mode), like ggml's nearest_int.
        const __m256i level = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(src + j + 8 * k), multiplier));
        levels[k] = _mm256_min_epi32(level, top);
      }
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(block.qs + j), pack_levels(levels));
      block.bsums[j / 16] = static_cast<int16_t>(simd::hsum(_mm256_add_epi32(levels[0], levels[1])));
      block.bsums[j / 16 + 1] = static_cast<int16_t>(simd::hsum(_mm256_add_epi32(levels[2], levels[3])));
    }
    block.d = 1.0f / inverse_scale;
  }
}

}  // namespace mnemo::kernels::avx2

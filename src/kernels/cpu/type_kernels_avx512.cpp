// AVX-512 (F/BW/VL/DQ/VNNI) kernels of the hot 32-element formats and of F32/F16. VNNI's dpbusd
// multiplies unsigned by signed bytes and adds groups of four straight into int32 lanes; mask
// registers replace AVX2's byte shuffles for signs and Q5_0's fifth bits.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/cpu/avx2_helpers.h"
#include "kernels/cpu/avx512_kernels.h"
#include "kernels/cpu/q8_0_block_avx512.h"
#include "tensor/quant_blocks.h"

namespace mnemo::kernels::avx512 {
namespace {

using simd::half_to_float;
using simd::load256;

// Signed x signed bytes through the unsigned x signed VNNI instruction: |x| times y with x's
// sign (exact unless y holds -128, which the activation quantisers never produce).
__m256i dot_i8_i8(__m256i x, __m256i y) {
  const __mmask32 negative = _mm256_movepi8_mask(x);
  const __m256i signed_y = _mm256_mask_sub_epi8(y, negative, _mm256_setzero_si256(), y);
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_abs_epi8(x), signed_y);
}

// (levels - offset) . y for unsigned levels: the offset's share is subtracted up front.
__m256i dot_offset_levels(__m256i levels, __m256i offset, __m256i y) {
  const __m256i offset_share = _mm256_dpbusd_epi32(_mm256_setzero_si256(), offset, y);
  return _mm256_dpbusd_epi32(_mm256_sub_epi32(_mm256_setzero_si256(), offset_share), levels, y);
}

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

__m256 fma_block(float scale, __m256i sums, __m256 acc) {
  return _mm256_fmadd_ps(_mm256_set1_ps(scale), _mm256_cvtepi32_ps(sums), acc);
}

template <class Block>
float scale_product(const Block& w, const BlockQ8_0& a) {
  return half_to_float(w.d) * half_to_float(a.d);
}

}  // namespace

float vec_dot_f32(int64_t n, const void* w, const void* a) {
  const auto* wf = static_cast<const float*>(w);
  const auto* af = static_cast<const float*>(a);
  __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    for (int k = 0; k < 4; ++k) {
      acc[k] = _mm512_fmadd_ps(_mm512_loadu_ps(wf + i + 16 * k), _mm512_loadu_ps(af + i + 16 * k), acc[k]);
    }
  }
  for (; i + 16 <= n; i += 16) acc[0] = _mm512_fmadd_ps(_mm512_loadu_ps(wf + i), _mm512_loadu_ps(af + i), acc[0]);
  if (i < n) {  // the tail through masked loads
    const __mmask16 rest = static_cast<__mmask16>((1u << (n - i)) - 1);
    acc[1] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(rest, wf + i), _mm512_maskz_loadu_ps(rest, af + i), acc[1]);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3])));
}

// Zen 4 converts halves at twice the rate in 256-bit registers (the 512-bit form is split in
// two), so the F16 dot works in 256-bit lanes, with eight accumulators to cover the FMA latency
// and a masked load for the tail.
float vec_dot_f16(int64_t n, const void* w, const void* a) {
  const auto* wh = static_cast<const uint16_t*>(w);
  const auto* ah = static_cast<const uint16_t*>(a);
  const auto load = [](const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); };
  __m256 acc[8];
  for (__m256& v : acc) v = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    for (int k = 0; k < 8; ++k) acc[k] = _mm256_fmadd_ps(load(wh + i + 8 * k), load(ah + i + 8 * k), acc[k]);
  }
  for (; i + 8 <= n; i += 8) acc[0] = _mm256_fmadd_ps(load(wh + i), load(ah + i), acc[0]);
  if (i < n) {
    const __mmask8 rest = static_cast<__mmask8>((1u << (n - i)) - 1);
    const __m256 wt = _mm256_cvtph_ps(_mm_maskz_loadu_epi16(rest, wh + i));
    const __m256 at = _mm256_cvtph_ps(_mm_maskz_loadu_epi16(rest, ah + i));
    acc[1] = _mm256_fmadd_ps(wt, at, acc[1]);
  }
  for (int k = 0; k < 4; ++k) acc[k] = _mm256_add_ps(acc[k], acc[k + 4]);
  return simd::hsum(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
}

// The 32-element formats go one block per 256-bit register: joining two blocks into a 512-bit
// one costs more shuffles than it saves on Zen 4.
float vec_dot_q8_0_q8_0(int64_t n, const void* w, const void* a) {
  const auto* wb = static_cast<const BlockQ8_0*>(w);
  const auto* ab = static_cast<const BlockQ8_0*>(a);
  return accumulate_blocks(n / kQK, [&](int64_t b, __m256 acc) {
    return fma_block(scale_product(wb[b], ab[b]), dot_i8_i8(load256(wb[b].qs), load256(ab[b].qs)), acc);
  });
}

float vec_dot_q4_0_q8_0(int64_t n, const void* w, const void* a) {
  const auto* wb = static_cast<const BlockQ4_0*>(w);
  const auto* ab = static_cast<const BlockQ8_0*>(a);
  const __m256i offset = _mm256_set1_epi8(8);
  return accumulate_blocks(n / kQK, [&](int64_t b, __m256 acc) {
    const __m256i sums = dot_offset_levels(simd::unpack_nibbles(wb[b].qs), offset, load256(ab[b].qs));
    return fma_block(scale_product(wb[b], ab[b]), sums, acc);
  });
}

float vec_dot_q5_0_q8_0(int64_t n, const void* w, const void* a) {
  const auto* wb = static_cast<const BlockQ5_0*>(w);
  const auto* ab = static_cast<const BlockQ8_0*>(a);
  const __m256i sixteen = _mm256_set1_epi8(16);
  return accumulate_blocks(n / kQK, [&](int64_t b, __m256 acc) {
    // qh's 32 bits are exactly a byte mask: add 16 where the fifth bit is set.
    uint32_t fifth_bits;
    std::memcpy(&fifth_bits, wb[b].qh, sizeof(fifth_bits));
    const __m256i nibbles = simd::unpack_nibbles(wb[b].qs);
    const __m256i levels = _mm256_mask_add_epi8(nibbles, _cvtu32_mask32(fifth_bits), nibbles, sixteen);
    const __m256i sums = dot_offset_levels(levels, sixteen, load256(ab[b].qs));
    return fma_block(scale_product(wb[b], ab[b]), sums, acc);
  });
}

// Bit-identical to the AVX2 quantiser (same scale, same rounding), 16 lanes at a time.
void q8_0_quantize_activations(const float* src, void* dst, int64_t n) {
  auto* blocks = static_cast<BlockQ8_0*>(dst);
  for (int64_t b = 0; b < n / kQK; ++b, src += kQK) {
    const Q8_0Levels levels = quantize_q8_0_block(src);
    blocks[b].d = levels.d;
    store_q8_0_levels(levels, blocks[b].qs);
  }
}

}  // namespace mnemo::kernels::avx512

// AVX2 KV tier conversions: the scalar reference's operations (kv_quant_scalar.cpp), eight
// elements at a time, in the same order and with the same rounding.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/cpu/avx2_helpers.h"
#include "kernels/cpu/kv_quant.h"

namespace mnemo::kernels::avx2 {
namespace {

using simd::float_to_half;
using simd::half_to_float;
using simd::load_f16x8;

void store_f16x8(uint16_t* p, __m256 v) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
}

__m256 abs_ps(__m256 v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v); }

float hmax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

float hmin(__m256 v) {
  __m128 m = _mm_min_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_min_ps(m, _mm_movehl_ps(m, m));
  m = _mm_min_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

// Eight 32-bit lanes within [-128, 127] -> their bytes, in order, as 64 bits.
uint64_t pack_signed_bytes(__m256i v) {
  const __m128i words = _mm_packs_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  return static_cast<uint64_t>(_mm_cvtsi128_si64(_mm_packs_epi16(words, words)));
}

// Eight 32-bit lanes within [0, 255] -> their bytes, in order, as 64 bits.
uint64_t pack_unsigned_bytes(__m256i v) {
  const __m128i words = _mm_packs_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  return static_cast<uint64_t>(_mm_cvtsi128_si64(_mm_packus_epi16(words, words)));
}

// Nibble codes (x - min) * inverse + 0.5, truncated, at most 15: eight lanes.
__m256i asymmetric_codes(__m256 x, __m256 min, __m256 inverse) {
  const __m256 scaled = _mm256_add_ps(_mm256_mul_ps(_mm256_sub_ps(x, min), inverse), _mm256_set1_ps(0.5f));
  return _mm256_min_epi32(_mm256_cvttps_epi32(scaled), _mm256_set1_epi32(15));
}

// A 32-element block as four vectors; returns its largest magnitude.
float load_block(const uint16_t* src, __m256 x[4]) {
  __m256 amax = _mm256_setzero_ps();
  for (int j = 0; j < 4; ++j) {
    x[j] = load_f16x8(src + 8 * j);
    amax = _mm256_max_ps(amax, abs_ps(x[j]));
  }
  return hmax(amax);
}

void q8_0_encode(const uint16_t* src, BlockQ8_0* dst, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b, src += kQK) {
    __m256 x[4];
    const float d = load_block(src, x) / 127.0f;
    const float inverse = d != 0.0f ? 1.0f / d : 0.0f;
    dst[b].d = float_to_half(d);
    const __m256 scale = _mm256_set1_ps(inverse);
    for (int j = 0; j < 4; ++j) {
      const __m256 rounded = _mm256_round_ps(_mm256_mul_ps(x[j], scale), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      const uint64_t bytes = pack_signed_bytes(_mm256_cvtps_epi32(rounded));
      std::memcpy(dst[b].qs + 8 * j, &bytes, 8);
    }
  }
}

void q8_0_decode(const BlockQ8_0* src, uint16_t* dst, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b, dst += kQK) {
    const __m256 d = _mm256_set1_ps(half_to_float(src[b].d));
    for (int j = 0; j < 4; ++j) {
      const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(src[b].qs + 8 * j));
      const __m256 q = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes));
      store_f16x8(dst + 8 * j, _mm256_mul_ps(q, d));
    }
  }
}

// Packs codes of elements [0, 16) (low nibbles) and [16, 32) (high) as the _0/_1 formats do.
void store_nibbles(const __m256i codes[4], uint8_t* qs) {
  for (int j = 0; j < 2; ++j) {
    const __m256i both = _mm256_or_si256(codes[j], _mm256_slli_epi32(codes[j + 2], 4));
    const uint64_t bytes = pack_unsigned_bytes(both);
    std::memcpy(qs + 8 * j, &bytes, 8);
  }
}

void q4_0_encode(const uint16_t* src, BlockQ4_0* dst, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b, src += kQK) {
    __m256 x[4];
    const float amax = load_block(src, x);
    // The first element of that magnitude, with its sign (the reference keeps the first).
    float max = 0.0f;
    if (amax != 0.0f) {
      const __m256 target = _mm256_set1_ps(amax);
      for (int j = 0; j < 4; ++j) {
        const int hits = _mm256_movemask_ps(_mm256_cmp_ps(abs_ps(x[j]), target, _CMP_EQ_OQ));
        if (hits != 0) {
          alignas(32) float lanes[8];
          _mm256_store_ps(lanes, x[j]);
          max = lanes[__builtin_ctz(static_cast<unsigned>(hits))];
          break;
        }
      }
    }
    const float d = max / -8.0f;
    const float inverse = d != 0.0f ? 1.0f / d : 0.0f;
    dst[b].d = float_to_half(d);
    __m256i codes[4];
    for (int j = 0; j < 4; ++j) {
      const __m256 scaled = _mm256_add_ps(_mm256_mul_ps(x[j], _mm256_set1_ps(inverse)), _mm256_set1_ps(8.5f));
      codes[j] = _mm256_min_epi32(_mm256_cvttps_epi32(scaled), _mm256_set1_epi32(15));
    }
    store_nibbles(codes, dst[b].qs);
  }
}

// 16 packed bytes -> the 32 codes as four vectors of eight 32-bit lanes (elements 0..31).
void load_nibbles(const uint8_t* qs, __m256i codes[4]) {
  for (int j = 0; j < 2; ++j) {
    const __m256i bytes = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(qs + 8 * j)));
    codes[j] = _mm256_and_si256(bytes, _mm256_set1_epi32(0x0f));
    codes[j + 2] = _mm256_srli_epi32(bytes, 4);
  }
}

void q4_0_decode(const BlockQ4_0* src, uint16_t* dst, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b, dst += kQK) {
    const __m256 d = _mm256_set1_ps(half_to_float(src[b].d));
    __m256i codes[4];
    load_nibbles(src[b].qs, codes);
    for (int j = 0; j < 4; ++j) {
      const __m256 q = _mm256_cvtepi32_ps(_mm256_sub_epi32(codes[j], _mm256_set1_epi32(8)));
      store_f16x8(dst + 8 * j, _mm256_mul_ps(q, d));
    }
  }
}

void q4_1_encode(const uint16_t* src, BlockQ4_1* dst, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b, src += kQK) {
    __m256 x[4];
    __m256 lo = load_f16x8(src), hi = lo;
    x[0] = lo;
    for (int j = 1; j < 4; ++j) {
      x[j] = load_f16x8(src + 8 * j);
      lo = _mm256_min_ps(lo, x[j]);
      hi = _mm256_max_ps(hi, x[j]);
    }
    // + 0: a minimum of -0 and +0 is either, by order; both become +0.
    const float min = hmin(lo) + 0.0f, max = hmax(hi) + 0.0f;
    const float d = (max - min) / 15.0f;
    const float inverse = d != 0.0f ? 1.0f / d : 0.0f;
    dst[b].d = float_to_half(d);
    dst[b].m = float_to_half(min);
    __m256i codes[4];
    for (int j = 0; j < 4; ++j) codes[j] = asymmetric_codes(x[j], _mm256_set1_ps(min), _mm256_set1_ps(inverse));
    store_nibbles(codes, dst[b].qs);
  }
}

void q4_1_decode(const BlockQ4_1* src, uint16_t* dst, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b, dst += kQK) {
    const __m256 d = _mm256_set1_ps(half_to_float(src[b].d)), m = _mm256_set1_ps(half_to_float(src[b].m));
    __m256i codes[4];
    load_nibbles(src[b].qs, codes);
    for (int j = 0; j < 4; ++j) store_f16x8(dst + 8 * j, _mm256_add_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(codes[j]), d), m));
  }
}

void channel_q4_encode(const uint16_t* src, uint8_t* dst, int32_t rows, int32_t dim) {
  auto* scales = reinterpret_cast<uint16_t*>(dst);
  uint16_t* mins = scales + dim;
  uint8_t* codes = dst + static_cast<size_t>(dim) * 4;
  for (int32_t c = 0; c < dim; c += 8) {
    __m256 lo = load_f16x8(src + c), hi = lo;
    for (int32_t r = 1; r < rows; ++r) {
      const __m256 x = load_f16x8(src + static_cast<size_t>(r) * dim + c);
      lo = _mm256_min_ps(lo, x);
      hi = _mm256_max_ps(hi, x);
    }
    lo = _mm256_add_ps(lo, _mm256_setzero_ps());  // -0 and +0 alike: +0 (as the reference)
    hi = _mm256_add_ps(hi, _mm256_setzero_ps());
    const __m256 d = _mm256_div_ps(_mm256_sub_ps(hi, lo), _mm256_set1_ps(15.0f));
    const __m256 nonzero = _mm256_cmp_ps(d, _mm256_setzero_ps(), _CMP_NEQ_OQ);
    const __m256 inverse = _mm256_and_ps(_mm256_div_ps(_mm256_set1_ps(1.0f), d), nonzero);
    store_f16x8(scales + c, d);
    store_f16x8(mins + c, lo);
    for (int32_t r = 0; r < rows; r += 2) {
      const __m256i even = asymmetric_codes(load_f16x8(src + static_cast<size_t>(r) * dim + c), lo, inverse);
      const __m256i odd = asymmetric_codes(load_f16x8(src + static_cast<size_t>(r + 1) * dim + c), lo, inverse);
      const uint64_t bytes = pack_unsigned_bytes(_mm256_or_si256(even, _mm256_slli_epi32(odd, 4)));
      std::memcpy(codes + static_cast<size_t>(r / 2) * dim + c, &bytes, 8);
    }
  }
}

void channel_q4_decode(const uint8_t* src, uint16_t* dst, int32_t rows, int32_t dim) {
  const auto* scales = reinterpret_cast<const uint16_t*>(src);
  const uint16_t* mins = scales + dim;
  const uint8_t* codes = src + static_cast<size_t>(dim) * 4;
  for (int32_t c = 0; c < dim; c += 8) {
    const __m256 d = load_f16x8(scales + c), m = load_f16x8(mins + c);
    for (int32_t r = 0; r < rows; r += 2) {
      const __m256i bytes =
          _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + static_cast<size_t>(r / 2) * dim + c)));
      const __m256 even = _mm256_cvtepi32_ps(_mm256_and_si256(bytes, _mm256_set1_epi32(0x0f)));
      const __m256 odd = _mm256_cvtepi32_ps(_mm256_srli_epi32(bytes, 4));
      store_f16x8(dst + static_cast<size_t>(r) * dim + c, _mm256_add_ps(_mm256_mul_ps(even, d), m));
      store_f16x8(dst + static_cast<size_t>(r + 1) * dim + c, _mm256_add_ps(_mm256_mul_ps(odd, d), m));
    }
  }
}

}  // namespace

const KvQuantKernels kKvQuant = {q8_0_encode, q8_0_decode, q4_0_encode, q4_0_decode,
                                 q4_1_encode, q4_1_decode, channel_q4_encode, channel_q4_decode};

}  // namespace mnemo::kernels::avx2

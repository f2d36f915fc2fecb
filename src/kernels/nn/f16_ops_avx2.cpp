// Compiled with -mavx2 -mfma -mf16c; only called when the CPU has them.
#include <immintrin.h>

#include <cstdint>

#include "util/fp16.h"

namespace mnemo::kernels::f16_avx2 {

static inline __m256 load_f16x8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

static inline float horizontal_sum(__m256 v) {
  const __m128 lo = _mm256_castps256_ps128(v);
  const __m128 hi = _mm256_extractf128_ps(v, 1);
  __m128 s = _mm_add_ps(lo, hi);
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

float dot_f32_f16(const float* a, const uint16_t* b, int64_t n) {
  __m256 acc0 = _mm256_setzero_ps();
  __m256 acc1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), load_f16x8(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), load_f16x8(b + i + 8), acc1);
  }
  for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), load_f16x8(b + i), acc0);
  float sum = horizontal_sum(_mm256_add_ps(acc0, acc1));
  for (; i < n; ++i) sum += a[i] * fp16_to_fp32(b[i]);
  return sum;
}

void axpy_f16(float scale, const uint16_t* b, float* acc, int64_t n) {
  const __m256 s = _mm256_set1_ps(scale);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(acc + i, _mm256_fmadd_ps(s, load_f16x8(b + i), _mm256_loadu_ps(acc + i)));
  }
  for (; i < n; ++i) acc[i] += scale * fp16_to_fp32(b[i]);
}

void to_f16(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
  }
  for (; i < n; ++i) dst[i] = fp32_to_fp16(src[i]);
}

}  // namespace mnemo::kernels::f16_avx2

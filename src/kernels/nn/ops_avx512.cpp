// AVX-512 pieces of the row operations (ops.cpp). Compiled with AVX-512 flags; only called
// once the CPU is known to have them.
#include <immintrin.h>

#include <cstdint>

namespace mnemo::kernels::ops_avx512 {

// sum of x[i] * x[i], each product in float and summed in double as the scalar version does,
// in 16 double lanes (two vectors) added by a fixed tree at the end.
double sum_of_squares(const float* x, int64_t n) {
  __m512d low = _mm512_setzero_pd();
  __m512d high = _mm512_setzero_pd();
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 mask = n - i >= 16 ? __mmask16(0xffff) : static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m512 v = _mm512_maskz_loadu_ps(mask, x + i);
    const __m512 squares = _mm512_mul_ps(v, v);
    low = _mm512_add_pd(low, _mm512_cvtps_pd(_mm512_castps512_ps256(squares)));
    high = _mm512_add_pd(high, _mm512_cvtps_pd(_mm512_extractf32x8_ps(squares, 1)));
  }
  const __m512d both = _mm512_add_pd(low, high);
  const __m256d four = _mm256_add_pd(_mm512_castpd512_pd256(both), _mm512_extractf64x4_pd(both, 1));
  const __m128d two = _mm_add_pd(_mm256_castpd256_pd128(four), _mm256_extractf128_pd(four, 1));
  return _mm_cvtsd_f64(_mm_add_sd(two, _mm_unpackhi_pd(two, two)));
}

}  // namespace mnemo::kernels::ops_avx512

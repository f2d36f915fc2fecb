// AVX2 exp_weights (exp_weights.h): the scalar reference's operations, 8 lanes at a time, two
// vectors per group of 16. Compiled with AVX2 and FMA flags; only called once the CPU is known to
// have them.
#include <immintrin.h>

#include <cfloat>
#include <cstdint>

#include "kernels/nn/exp_weights_constants.h"

namespace mnemo::kernels::exp_weights_avx2 {
namespace {

using namespace exp_weights_constants;

__m256 weights8(__m256 x, __m256 max, __m256 temperature) {
  // min(a, b) is b when either is NaN: a NaN logit stays NaN and fails the range test.
  const __m256 v = _mm256_min_ps(_mm256_set1_ps(FLT_MAX), x);
  const __m256 z = _mm256_min_ps(_mm256_setzero_ps(), _mm256_div_ps(_mm256_sub_ps(v, max), temperature));
  const __m256 in_range = _mm256_cmp_ps(z, _mm256_set1_ps(kLowest), _CMP_GE_OQ);
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(z, _mm256_set1_ps(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2High), z);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Low), r);
  __m256 p = _mm256_set1_ps(kPoly[0]);
  for (int i = 1; i < 7; ++i) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kPoly[i]));
  const __m256i exponent = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
  return _mm256_and_ps(in_range, _mm256_mul_ps(p, _mm256_castsi256_ps(_mm256_slli_epi32(exponent, 23))));
}

}  // namespace

void exp_weights(const float* x, int64_t n, float max, float temperature, float* out, double* lane_sums) {
  const __m256 max_v = _mm256_set1_ps(max), temperature_v = _mm256_set1_ps(temperature);
  __m256d sums[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd()};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    for (int half = 0; half < 2; ++half) {
      const __m256 w = weights8(_mm256_loadu_ps(x + i + 8 * half), max_v, temperature_v);
      _mm256_storeu_ps(out + i + 8 * half, w);
      sums[2 * half] = _mm256_add_pd(sums[2 * half], _mm256_cvtps_pd(_mm256_castps256_ps128(w)));
      sums[2 * half + 1] = _mm256_add_pd(sums[2 * half + 1], _mm256_cvtps_pd(_mm256_extractf128_ps(w, 1)));
    }
  }
  for (int q = 0; q < 4; ++q) _mm256_storeu_pd(lane_sums + 4 * q, sums[q]);
  double tail = 0.0;
  for (; i < n; i += 8) {
    alignas(32) float in[8] = {}, w[8];
    for (int64_t k = 0; k < 8 && i + k < n; ++k) in[k] = x[i + k];
    _mm256_store_ps(w, weights8(_mm256_load_ps(in), max_v, temperature_v));
    for (int64_t k = 0; k < 8 && i + k < n; ++k) {
      out[i + k] = w[k];
      tail += static_cast<double>(w[k]);
    }
  }
  lane_sums[16] = tail;
}

}  // namespace mnemo::kernels::exp_weights_avx2

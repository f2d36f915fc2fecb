// AVX-512 exp_weights (exp_weights.h): the scalar reference's operations, 16 lanes at a time.
// Compiled with AVX-512 flags; only called once the CPU is known to have them.
#include <immintrin.h>

#include <cfloat>
#include <cstdint>

#include "kernels/nn/exp_weights_constants.h"

namespace mnemo::kernels::exp_weights_avx512 {
namespace {

using namespace exp_weights_constants;

__m512 weights16(__m512 x, __m512 max, __m512 temperature) {
  // min(a, b) is b when either is NaN: a NaN logit stays NaN and fails the range test.
  const __m512 v = _mm512_min_ps(_mm512_set1_ps(FLT_MAX), x);
  const __m512 z = _mm512_min_ps(_mm512_setzero_ps(), _mm512_div_ps(_mm512_sub_ps(v, max), temperature));
  const __mmask16 in_range = _mm512_cmp_ps_mask(z, _mm512_set1_ps(kLowest), _CMP_GE_OQ);
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(z, _mm512_set1_ps(kLog2e)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2High), z);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Low), r);
  __m512 p = _mm512_set1_ps(kPoly[0]);
  for (int i = 1; i < 7; ++i) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kPoly[i]));
  const __m512i exponent = _mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127));
  return _mm512_maskz_mul_ps(in_range, p, _mm512_castsi512_ps(_mm512_slli_epi32(exponent, 23)));
}

}  // namespace

void exp_weights(const float* x, int64_t n, float max, float temperature, float* out, double* lane_sums) {
  const __m512 max_v = _mm512_set1_ps(max), temperature_v = _mm512_set1_ps(temperature);
  __m512d low = _mm512_setzero_pd(), high = _mm512_setzero_pd();  // lanes 0-7, 8-15
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 w = weights16(_mm512_loadu_ps(x + i), max_v, temperature_v);
    _mm512_storeu_ps(out + i, w);
    low = _mm512_add_pd(low, _mm512_cvtps_pd(_mm512_castps512_ps256(w)));
    high = _mm512_add_pd(high, _mm512_cvtps_pd(_mm512_extractf32x8_ps(w, 1)));
  }
  _mm512_storeu_pd(lane_sums, low);
  _mm512_storeu_pd(lane_sums + 8, high);
  double tail = 0.0;
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    alignas(64) float w[16];
    _mm512_store_ps(w, weights16(_mm512_maskz_loadu_ps(m, x + i), max_v, temperature_v));
    for (int64_t k = 0; i + k < n; ++k) {
      out[i + k] = w[k];
      tail += static_cast<double>(w[k]);
    }
  }
  lane_sums[16] = tail;
}

}  // namespace mnemo::kernels::exp_weights_avx512

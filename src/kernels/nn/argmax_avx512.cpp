// AVX-512 argmax (argmax.h): two vectors of 16 lanes, each lane keeping the first maximum of
// the indices it sees. Compiled with AVX-512 flags; only called once the CPU is known to have
// them.
#include <immintrin.h>

#include <cfloat>
#include <cmath>
#include <cstdint>

#include "kernels/nn/argmax_lanes.h"

namespace mnemo::kernels::argmax_avx512 {
namespace {

// The better of two (value, index) lane sets: the larger value, on a tie the lower index.
void keep_better(__m512& value, __m512i& index, __m512 other_value, __m512i other_index) {
  const __mmask16 larger = _mm512_cmp_ps_mask(other_value, value, _CMP_GT_OQ);
  const __mmask16 tie_lower = _mm512_cmp_ps_mask(other_value, value, _CMP_EQ_OQ) &
                              _mm512_cmplt_epi32_mask(other_index, index);
  value = _mm512_mask_mov_ps(value, larger | tie_lower, other_value);
  index = _mm512_mask_mov_epi32(index, larger | tie_lower, other_index);
}

}  // namespace

int32_t argmax(const float* x, int64_t n) {
  const __m512 largest = _mm512_set1_ps(FLT_MAX);
  const __m512i step = _mm512_set1_epi32(32);
  __m512 max0 = _mm512_set1_ps(-INFINITY), max1 = max0;
  __m512i at0 = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  __m512i at1 = _mm512_add_epi32(at0, _mm512_set1_epi32(16));
  __m512i best0 = at0, best1 = at1;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    // min(largest, v) is v when v is NaN (the second operand), which then never compares greater.
    const __m512 v0 = _mm512_min_ps(largest, _mm512_loadu_ps(x + i));
    const __m512 v1 = _mm512_min_ps(largest, _mm512_loadu_ps(x + i + 16));
    const __mmask16 m0 = _mm512_cmp_ps_mask(v0, max0, _CMP_GT_OQ);
    const __mmask16 m1 = _mm512_cmp_ps_mask(v1, max1, _CMP_GT_OQ);
    max0 = _mm512_mask_mov_ps(max0, m0, v0);
    max1 = _mm512_mask_mov_ps(max1, m1, v1);
    best0 = _mm512_mask_mov_epi32(best0, m0, at0);
    best1 = _mm512_mask_mov_epi32(best1, m1, at1);
    at0 = _mm512_add_epi32(at0, step);
    at1 = _mm512_add_epi32(at1, step);
  }
  keep_better(max0, best0, max1, best1);
  alignas(64) float values[16];
  alignas(64) int32_t indices[16];
  _mm512_store_ps(values, max0);
  _mm512_store_epi32(indices, best0);
  return argmax_finish(values, indices, 16, x, i, n);
}

}  // namespace mnemo::kernels::argmax_avx512

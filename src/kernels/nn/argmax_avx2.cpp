// AVX2 argmax (argmax.h): two vectors of 8 lanes, each lane keeping the first maximum of the
// indices it sees. Compiled with AVX2 flags; only called once the CPU is known to have them.
#include <immintrin.h>

#include <cfloat>
#include <cmath>
#include <cstdint>

#include "kernels/nn/argmax_lanes.h"

namespace mnemo::kernels::argmax_avx2 {
namespace {

// The better of two (value, index) lane sets: the larger value, on a tie the lower index.
void keep_better(__m256& value, __m256i& index, __m256 other_value, __m256i other_index) {
  const __m256 larger = _mm256_cmp_ps(other_value, value, _CMP_GT_OQ);
  const __m256 tie = _mm256_cmp_ps(other_value, value, _CMP_EQ_OQ);
  const __m256i lower = _mm256_cmpgt_epi32(index, other_index);
  const __m256 take = _mm256_or_ps(larger, _mm256_and_ps(tie, _mm256_castsi256_ps(lower)));
  value = _mm256_blendv_ps(value, other_value, take);
  index = _mm256_castps_si256(
      _mm256_blendv_ps(_mm256_castsi256_ps(index), _mm256_castsi256_ps(other_index), take));
}

}  // namespace

int32_t argmax(const float* x, int64_t n) {
  const __m256 largest = _mm256_set1_ps(FLT_MAX);
  const __m256i step = _mm256_set1_epi32(16);
  __m256 max0 = _mm256_set1_ps(-INFINITY), max1 = max0;
  __m256i at0 = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  __m256i at1 = _mm256_add_epi32(at0, _mm256_set1_epi32(8));
  __m256i best0 = at0, best1 = at1;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    // min(largest, v) is v when v is NaN (the second operand), which then never compares greater.
    const __m256 v0 = _mm256_min_ps(largest, _mm256_loadu_ps(x + i));
    const __m256 v1 = _mm256_min_ps(largest, _mm256_loadu_ps(x + i + 8));
    const __m256 m0 = _mm256_cmp_ps(v0, max0, _CMP_GT_OQ);
    const __m256 m1 = _mm256_cmp_ps(v1, max1, _CMP_GT_OQ);
    max0 = _mm256_blendv_ps(max0, v0, m0);
    max1 = _mm256_blendv_ps(max1, v1, m1);
    best0 = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(best0), _mm256_castsi256_ps(at0), m0));
    best1 = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(best1), _mm256_castsi256_ps(at1), m1));
    at0 = _mm256_add_epi32(at0, step);
    at1 = _mm256_add_epi32(at1, step);
  }
  keep_better(max0, best0, max1, best1);
  alignas(32) float values[8];
  alignas(32) int32_t indices[8];
  _mm256_store_ps(values, max0);
  _mm256_store_si256(reinterpret_cast<__m256i*>(indices), best0);
  return argmax_finish(values, indices, 8, x, i, n);
}

}  // namespace mnemo::kernels::argmax_avx2

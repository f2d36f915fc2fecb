// Compiled with -mavx2 -mfma -mf16c; only called when the CPU has them.
#include <immintrin.h>

#include <cstdint>


namespace mnemo::kernels::f16_avx2 {

// Scalar conversions through F16C for the tails (not util/fp16.h: an inline function emitted in
// this translation unit could become the program-wide copy, see avx2_helpers.h).
static inline float half_to_float(uint16_t h) { return _cvtsh_ss(h); }
static inline uint16_t float_to_half(float f) {
  return static_cast<uint16_t>(_mm_extract_epi16(_mm_cvtps_ph(_mm_set_ss(f), _MM_FROUND_TO_NEAREST_INT), 0));
}

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
  for (; i < n; ++i) sum += a[i] * half_to_float(b[i]);
  return sum;
}

void axpy_f16(float scale, const uint16_t* b, float* acc, int64_t n) {
  const __m256 s = _mm256_set1_ps(scale);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(acc + i, _mm256_fmadd_ps(s, load_f16x8(b + i), _mm256_loadu_ps(acc + i)));
  }
  for (; i < n; ++i) acc[i] += scale * half_to_float(b[i]);
}

void to_f16(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
  }
  for (; i < n; ++i) dst[i] = float_to_half(src[i]);
}

void from_f16(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, load_f16x8(src + i));
  for (; i < n; ++i) dst[i] = half_to_float(src[i]);
}

// The GELU table lookup of geglu (ops.cpp) eight at a time: the conversions to and from F16 in
// F16C (the same rounding as util/fp16.h), the lookups scalar (a gather is slower on Zen 4).
void geglu_table(const uint16_t* table, const float* gate, const float* up, float* out, int64_t n) {
  const __m256 low = _mm256_set1_ps(-10.0f), high = _mm256_set1_ps(10.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i);
    alignas(16) uint16_t h[8];
    _mm_store_si128(reinterpret_cast<__m128i*>(h), _mm256_cvtps_ph(g, _MM_FROUND_TO_NEAREST_INT));
    for (uint16_t& x : h) x = table[x];
    __m256 activated = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(h)));
    // Outside (-10, 10) GELU is 0 or the identity, as in the scalar version.
    activated = _mm256_blendv_ps(activated, g, _mm256_cmp_ps(g, high, _CMP_GE_OQ));
    activated = _mm256_blendv_ps(activated, _mm256_setzero_ps(), _mm256_cmp_ps(g, low, _CMP_LE_OQ));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(activated, _mm256_loadu_ps(up + i)));
  }
  for (; i < n; ++i) {
    const float g = gate[i];
    const float activated = g <= -10.0f ? 0.0f : (g >= 10.0f ? g : half_to_float(table[float_to_half(g)]));
    out[i] = activated * up[i];
  }
}

}  // namespace mnemo::kernels::f16_avx2

// AVX2 kernels of the plain float types: F32 dot, F16 (F16C conversions) and BF16. Products are
// accumulated in single precision over four independent accumulators, as ggml's SIMD path does.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/cpu/avx2_helpers.h"
#include "kernels/cpu/avx2_kernels.h"

namespace mnemo::kernels::avx2 {
namespace {

using simd::load_f16x8;

constexpr int64_t kLanes = 8;
constexpr int64_t kUnroll = 4 * kLanes;

__m256 load_bf16x8(const uint16_t* p) {
  const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
}

float bf16_to_float_scalar(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

// Round to nearest even; NaNs stay (quiet) NaNs. Matches util/fp16.h's fp32_to_bf16.
uint16_t float_to_bf16_scalar(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 64u);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

// The dot product skeleton shared by the three types: `load` widens 8 elements to floats.
template <class Element, class Load, class LoadScalar>
float dot(int64_t n, const Element* w, const Element* a, Load load, LoadScalar load_scalar) {
  __m256 acc0 = _mm256_setzero_ps();
  __m256 acc1 = _mm256_setzero_ps();
  __m256 acc2 = _mm256_setzero_ps();
  __m256 acc3 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + kUnroll <= n; i += kUnroll) {
    acc0 = _mm256_fmadd_ps(load(w + i), load(a + i), acc0);
    acc1 = _mm256_fmadd_ps(load(w + i + 8), load(a + i + 8), acc1);
    acc2 = _mm256_fmadd_ps(load(w + i + 16), load(a + i + 16), acc2);
    acc3 = _mm256_fmadd_ps(load(w + i + 24), load(a + i + 24), acc3);
  }
  for (; i + kLanes <= n; i += kLanes) acc0 = _mm256_fmadd_ps(load(w + i), load(a + i), acc0);
  float sum = simd::hsum(_mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3)));
  for (; i < n; ++i) sum += load_scalar(w[i]) * load_scalar(a[i]);
  return sum;
}

}  // namespace

float vec_dot_f32(int64_t n, const void* w, const void* a) {
  return dot(
      n, static_cast<const float*>(w), static_cast<const float*>(a),
      [](const float* p) { return _mm256_loadu_ps(p); }, [](float x) { return x; });
}

void f16_to_float(const void* src, float* dst, int64_t n) {
  const auto* h = static_cast<const uint16_t*>(src);
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) _mm256_storeu_ps(dst + i, load_f16x8(h + i));
  for (; i < n; ++i) dst[i] = simd::half_to_float(h[i]);
}

void f16_from_float(const float* src, void* dst, int64_t n) {
  auto* h = static_cast<uint16_t*>(dst);
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    const __m128i halves =
        _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(h + i), halves);
  }
  for (; i < n; ++i) h[i] = simd::float_to_half(src[i]);
}

float vec_dot_f16(int64_t n, const void* w, const void* a) {
  return dot(
      n, static_cast<const uint16_t*>(w), static_cast<const uint16_t*>(a),
      [](const uint16_t* p) { return load_f16x8(p); },
      [](uint16_t h) { return simd::half_to_float(h); });
}

void bf16_to_float(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const uint16_t*>(src);
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) _mm256_storeu_ps(dst + i, load_bf16x8(b + i));
  for (; i < n; ++i) dst[i] = bf16_to_float_scalar(b[i]);
}

void bf16_from_float(const float* src, void* dst, int64_t n) {
  auto* b = static_cast<uint16_t*>(dst);
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
  const __m256i infinity = _mm256_set1_epi32(0x7f800000);
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    const __m256i bits = _mm256_castps_si256(_mm256_loadu_ps(src + i));
    const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
    const __m256i bias = _mm256_add_epi32(_mm256_set1_epi32(0x7fff), odd);
    const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(bits, bias), 16);
    const __m256i quiet_nan = _mm256_or_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(64));
    const __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(bits, abs_mask), infinity);
    const __m256i result = _mm256_blendv_epi8(rounded, quiet_nan, is_nan);
    // packus works per 128-bit lane: gather the two useful quarters.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(result, result), 0x08);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(b + i), _mm256_castsi256_si128(packed));
  }
  for (; i < n; ++i) b[i] = float_to_bf16_scalar(src[i]);
}

float vec_dot_bf16(int64_t n, const void* w, const void* a) {
  return dot(
      n, static_cast<const uint16_t*>(w), static_cast<const uint16_t*>(a),
      [](const uint16_t* p) { return load_bf16x8(p); },
      [](uint16_t b) { return bf16_to_float_scalar(b); });
}

}  // namespace mnemo::kernels::avx2

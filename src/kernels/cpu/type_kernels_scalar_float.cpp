// Scalar kernels of the plain float types. Like ggml's reference path, the dot products add the
// (single precision) products in double, so the reference is more accurate than any SIMD order.
#include <cstring>

#include "kernels/cpu/scalar_kernels.h"
#include "util/fp16.h"

namespace mnemo::kernels::scalar {

void f32_to_float(const void* src, float* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

void f32_from_float(const float* src, void* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

float vec_dot_f32(int64_t n, const void* w, const void* a) {
  const auto* wf = static_cast<const float*>(w);
  const auto* af = static_cast<const float*>(a);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(wf[i] * af[i]);
  return static_cast<float>(sum);
}

void f16_to_float(const void* src, float* dst, int64_t n) {
  const auto* h = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32(h[i]);
}

void f16_from_float(const float* src, void* dst, int64_t n) {
  auto* h = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) h[i] = fp32_to_fp16(src[i]);
}

float vec_dot_f16(int64_t n, const void* w, const void* a) {
  const auto* wh = static_cast<const uint16_t*>(w);
  const auto* ah = static_cast<const uint16_t*>(a);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    sum += static_cast<double>(fp16_to_fp32(wh[i]) * fp16_to_fp32(ah[i]));
  }
  return static_cast<float>(sum);
}

void bf16_to_float(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_fp32(b[i]);
}

void bf16_from_float(const float* src, void* dst, int64_t n) {
  auto* b = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) b[i] = fp32_to_bf16(src[i]);
}

float vec_dot_bf16(int64_t n, const void* w, const void* a) {
  const auto* wb = static_cast<const uint16_t*>(w);
  const auto* ab = static_cast<const uint16_t*>(a);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    sum += static_cast<double>(bf16_to_fp32(wb[i]) * bf16_to_fp32(ab[i]));
  }
  return static_cast<float>(sum);
}

}  // namespace mnemo::kernels::scalar

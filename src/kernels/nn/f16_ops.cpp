#include "kernels/nn/f16_ops.h"

#include "util/fp16.h"

namespace mnemo::kernels {
namespace f16_avx2 {
float dot_f32_f16(const float* a, const uint16_t* b, int64_t n);
void axpy_f16(float scale, const uint16_t* b, float* acc, int64_t n);
void to_f16(const float* src, uint16_t* dst, int64_t n);
void from_f16(const uint16_t* src, float* dst, int64_t n);
void geglu_table(const uint16_t* table, const float* gate, const float* up, float* out, int64_t n);
}  // namespace f16_avx2

namespace {

float dot_f32_f16_scalar(const float* a, const uint16_t* b, int64_t n) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += a[i] * fp16_to_fp32(b[i]);
  return sum;
}

void axpy_f16_scalar(float scale, const uint16_t* b, float* acc, int64_t n) {
  for (int64_t i = 0; i < n; ++i) acc[i] += scale * fp16_to_fp32(b[i]);
}

void to_f16_scalar(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = fp32_to_fp16(src[i]);
}

void from_f16_scalar(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32(src[i]);
}

void geglu_table_scalar(const uint16_t* table, const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    float activated;
    if (g <= -10.0f) {
      activated = 0.0f;
    } else if (g >= 10.0f) {
      activated = g;
    } else {
      activated = fp16_to_fp32(table[fp32_to_fp16(g)]);
    }
    out[i] = activated * up[i];
  }
}

constexpr F16Ops kScalarOps{dot_f32_f16_scalar, axpy_f16_scalar, to_f16_scalar, from_f16_scalar, geglu_table_scalar};
constexpr F16Ops kAvx2Ops{f16_avx2::dot_f32_f16, f16_avx2::axpy_f16, f16_avx2::to_f16, f16_avx2::from_f16,
                          f16_avx2::geglu_table};

}  // namespace

const F16Ops& f16_ops(Isa isa) {
  if (isa != Isa::kScalar && isa_supported(Isa::kAvx2)) return kAvx2Ops;
  return kScalarOps;
}

const F16Ops& f16_ops() {
  static const F16Ops& ops = f16_ops(detected_isa());
  return ops;
}

}  // namespace mnemo::kernels

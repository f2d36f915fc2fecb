// Mixed F32/F16 vector primitives: attention over the F16 KV cache, the K/V stores into it, and
// GeGLU's F16 table. Chosen once at start-up (scalar reference or AVX2+F16C, bit-identical).
#pragma once

#include <cstdint>

#include "kernels/cpu/type_kernels.h"

namespace mnemo::kernels {

struct F16Ops {
  // sum_i a[i] * b[i]
  float (*dot_f32_f16)(const float* a, const uint16_t* b, int64_t n);
  // acc[i] += scale * b[i]
  void (*axpy_f16)(float scale, const uint16_t* b, float* acc, int64_t n);
  // dst[i] = f16(src[i]) with round-to-nearest-even
  void (*to_f16)(const float* src, uint16_t* dst, int64_t n);
  // dst[i] = f32(src[i]) (exact)
  void (*from_f16)(const uint16_t* src, float* dst, int64_t n);
  // out[i] = f32(table[f16(gate[i])]) * up[i], or 0 / gate[i] itself outside (-10, 10)
  void (*geglu_table)(const uint16_t* table, const float* gate, const float* up, float* out, int64_t n);
};

const F16Ops& f16_ops();
const F16Ops& f16_ops(Isa isa);  // kScalar always; kAvx2 / kAvx512 (same as AVX2) when supported

}  // namespace mnemo::kernels

// Per-type CPU kernels, chosen once at start-up from the CPU's features through a dispatch
// table (no #ifdef in headers). Every SIMD variant has a scalar reference it is cross-checked
// against (tests/kernels/).
//
// Dot products follow llama.cpp's numerics so that greedy outputs agree token for token:
// activations are first quantised once per row to the weight type's `vec_dot_type`, then combined
// with integer (or half) dot products:
//   Q4_0, Q5_0, Q8_0 -> Q8_0        Q4_1, Q5_1 -> Q8_1 (Q8_0 plus d * sum(qs), as ggml pairs them)
//   Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS -> Q8_K        IQ4_NL, MXFP4 -> Q8_0
//   F16 -> F16, BF16 -> BF16, F32 -> F32
// Q8_1 and Q8_K are activation formats only: they have to_float/from_float but no vec_dot.
//
// Pointers to quantised data must be aligned like the block struct (2 bytes, 4 for Q8_K), which
// rows of a GGUF tensor always are.
#pragma once

#include <cstdint>
#include <string_view>

#include "tensor/dtype.h"

namespace mnemo::kernels {

enum class Isa { kScalar, kAvx2, kAvx512 };

std::string_view isa_name(Isa isa);
// The best variant this CPU supports (MNEMO_ISA=scalar|avx2|avx512 in the environment caps it).
Isa detected_isa();
// Whether this CPU (and OS) can run the variant, regardless of MNEMO_ISA.
bool isa_supported(Isa isa);

struct TypeKernels {
  DType type;
  DType vec_dot_type;
  // Dequantise n elements (n a multiple of the block size).
  void (*to_float)(const void* src, float* dst, int64_t n);
  // Quantise n floats into this type (reference quantiser; exact for Q8_0/Q8_K/F16/BF16/F32).
  // The same on every ISA, so files made with it do not depend on the machine.
  void (*from_float)(const float* src, void* dst, int64_t n);
  // sum_i w[i] * a[i] over n elements; w in `type`, a in `vec_dot_type`. Null for Q8_1/Q8_K.
  float (*vec_dot)(int64_t n, const void* w, const void* a);
  // Quantises activations into this type the way llama.cpp's CPU backend built for this ISA
  // does; matmul uses it. It differs from from_float only for Q8_0/Q8_1 on SIMD ISAs, where
  // ggml scales by 127/amax and rounds half to even instead of dividing by amax/127 and rounding
  // half away from zero (a difference of one unit in rare elements).
  void (*quantize_activations)(const float* src, void* dst, int64_t n);
};

// nullptr when the type has no kernels (or, for the second overload, when this CPU cannot run
// `isa`). The first overload uses detected_isa().
const TypeKernels* type_kernels(DType type);
const TypeKernels* type_kernels(DType type, Isa isa);

}  // namespace mnemo::kernels

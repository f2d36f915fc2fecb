// Kernels compiled for AVX-512 F/BW/VL/DQ/VNNI (type_kernels_avx512*.cpp), for the hot types;
// the others use their AVX2 kernel. Only called once isa_supported(Isa::kAvx512) said yes.
#pragma once

#include <cstdint>

#include "kernels/cpu/gemm.h"

namespace mnemo::kernels::avx512 {

float vec_dot_f32(int64_t n, const void* w, const void* a);
float vec_dot_f16(int64_t n, const void* w, const void* a);

float vec_dot_q4_0_q8_0(int64_t n, const void* w, const void* a);
float vec_dot_q5_0_q8_0(int64_t n, const void* w, const void* a);
float vec_dot_q8_0_q8_0(int64_t n, const void* w, const void* a);
// Bit-identical to avx2::q8_0_quantize_activations.
void q8_0_quantize_activations(const float* src, void* dst, int64_t n);

float vec_dot_q4_K_q8_K(int64_t n, const void* w, const void* a);
float vec_dot_q5_K_q8_K(int64_t n, const void* w, const void* a);
float vec_dot_q6_K_q8_K(int64_t n, const void* w, const void* a);

// GEMM kernels (gemm_avx512*.cpp; see gemm.h).
extern const ActivationPacker kPackQ8_0Offset8;
extern const ActivationPacker kPackQ8_0Offset16;
extern const ActivationPacker kPackQ8_0Offset128;
extern const ActivationPacker kPackQ8_1;
extern const GemmKernel kGemmQ4_0;
extern const GemmKernel kGemmQ4_1;
extern const GemmKernel kGemmQ5_0;
extern const GemmKernel kGemmQ5_1;
extern const GemmKernel kGemmQ8_0;
extern const ActivationPacker kPackQ8_K;
extern const GemmKernel kGemmQ4_K;
extern const GemmKernel kGemmQ5_K;
extern const GemmKernel kGemmQ6_K;
extern const ActivationPacker kPackF32;
extern const ActivationPacker kPackF16;
extern const ActivationPacker kPackBF16;
extern const GemmKernel kGemmF32;
extern const GemmKernel kGemmF16;
extern const GemmKernel kGemmBF16;

}  // namespace mnemo::kernels::avx512

// Kernels compiled for AVX2+FMA+F16C (type_kernels_avx2*.cpp). Only the dispatch table may take
// their addresses, and only calls them once isa_supported(Isa::kAvx2) said yes. Types without an
// entry here use the scalar kernel.
#pragma once

#include <cstdint>

#include "kernels/cpu/gemm.h"

namespace mnemo::kernels::avx2 {

float vec_dot_f32(int64_t n, const void* w, const void* a);
void f16_to_float(const void* src, float* dst, int64_t n);
void f16_from_float(const float* src, void* dst, int64_t n);
float vec_dot_f16(int64_t n, const void* w, const void* a);
void bf16_to_float(const void* src, float* dst, int64_t n);
void bf16_from_float(const float* src, void* dst, int64_t n);
float vec_dot_bf16(int64_t n, const void* w, const void* a);

float vec_dot_q4_0_q8_0(int64_t n, const void* w, const void* a);
float vec_dot_q4_1_q8_1(int64_t n, const void* w, const void* a);
float vec_dot_q5_0_q8_0(int64_t n, const void* w, const void* a);
float vec_dot_q5_1_q8_1(int64_t n, const void* w, const void* a);
float vec_dot_q8_0_q8_0(int64_t n, const void* w, const void* a);
// ggml's SIMD activation quantisers: scale by 127/amax, round half to even.
void q8_0_quantize_activations(const float* src, void* dst, int64_t n);
void q8_1_quantize_activations(const float* src, void* dst, int64_t n);

float vec_dot_q4_K_q8_K(int64_t n, const void* w, const void* a);
float vec_dot_q5_K_q8_K(int64_t n, const void* w, const void* a);
float vec_dot_q6_K_q8_K(int64_t n, const void* w, const void* a);
float vec_dot_q2_K_q8_K(int64_t n, const void* w, const void* a);
float vec_dot_q3_K_q8_K(int64_t n, const void* w, const void* a);
float vec_dot_iq4_nl_q8_0(int64_t n, const void* w, const void* a);
float vec_dot_iq4_xs_q8_K(int64_t n, const void* w, const void* a);
float vec_dot_mxfp4_q8_0(int64_t n, const void* w, const void* a);
// Bit-identical to scalar::q8_K_from_float.
void q8_K_from_float(const float* src, void* dst, int64_t n);

// GEMM (gemm_avx2.cpp) of the 32-element formats, in 8-row tiles.
extern const ActivationPacker kPackQ8_0;
extern const ActivationPacker kPackQ8_0Offset8;
extern const ActivationPacker kPackQ8_0Offset16;
extern const ActivationPacker kPackQ8_1;
extern const GemmKernel kGemmQ8_0;
extern const GemmKernel kGemmQ4_0;
extern const GemmKernel kGemmQ5_0;
extern const GemmKernel kGemmQ4_1;
extern const GemmKernel kGemmQ5_1;
extern const GemmKernel kGemmIQ4_NL;
extern const GemmKernel kGemmMXFP4;
// GEMM (gemm_avx2_k.cpp) of the 256-element formats, in 8-row tiles.
extern const ActivationPacker kPackQ8_K;
extern const GemmKernel kGemmQ2_K;
extern const GemmKernel kGemmQ3_K;
extern const GemmKernel kGemmQ4_K;
extern const GemmKernel kGemmQ5_K;
extern const GemmKernel kGemmQ6_K;
extern const GemmKernel kGemmIQ4_XS;

}  // namespace mnemo::kernels::avx2

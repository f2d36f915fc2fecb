// Kernels compiled for AVX-512 F/BW/VL/DQ/VNNI (type_kernels_avx512*.cpp), for the hot types;
// the others use their AVX2 kernel. Only called once isa_supported(Isa::kAvx512) said yes.
#pragma once

#include <cstdint>

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

}  // namespace mnemo::kernels::avx512

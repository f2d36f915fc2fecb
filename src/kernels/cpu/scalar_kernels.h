// The scalar kernels: the reference every SIMD variant is checked against, and the fallback on
// CPUs without AVX2. Declared here for the dispatch table (type_kernels.cpp) and for SIMD code
// that reuses a scalar piece (a quantiser with no SIMD gain).
#pragma once

#include <cstdint>

namespace mnemo::kernels::scalar {

void f32_to_float(const void* src, float* dst, int64_t n);
void f32_from_float(const float* src, void* dst, int64_t n);
float vec_dot_f32(int64_t n, const void* w, const void* a);

void f16_to_float(const void* src, float* dst, int64_t n);
void f16_from_float(const float* src, void* dst, int64_t n);
float vec_dot_f16(int64_t n, const void* w, const void* a);

void bf16_to_float(const void* src, float* dst, int64_t n);
void bf16_from_float(const float* src, void* dst, int64_t n);
float vec_dot_bf16(int64_t n, const void* w, const void* a);

void q4_0_to_float(const void* src, float* dst, int64_t n);
void q4_0_from_float(const float* src, void* dst, int64_t n);
float vec_dot_q4_0_q8_0(int64_t n, const void* w, const void* a);

void q4_1_to_float(const void* src, float* dst, int64_t n);
void q4_1_from_float(const float* src, void* dst, int64_t n);
float vec_dot_q4_1_q8_1(int64_t n, const void* w, const void* a);

void q5_0_to_float(const void* src, float* dst, int64_t n);
void q5_0_from_float(const float* src, void* dst, int64_t n);
float vec_dot_q5_0_q8_0(int64_t n, const void* w, const void* a);

void q5_1_to_float(const void* src, float* dst, int64_t n);
void q5_1_from_float(const float* src, void* dst, int64_t n);
float vec_dot_q5_1_q8_1(int64_t n, const void* w, const void* a);

void q8_0_to_float(const void* src, float* dst, int64_t n);
void q8_0_from_float(const float* src, void* dst, int64_t n);
float vec_dot_q8_0_q8_0(int64_t n, const void* w, const void* a);

void q8_1_to_float(const void* src, float* dst, int64_t n);
void q8_1_from_float(const float* src, void* dst, int64_t n);

void q4_K_to_float(const void* src, float* dst, int64_t n);
void q4_K_from_float(const float* src, void* dst, int64_t n);
float vec_dot_q4_K_q8_K(int64_t n, const void* w, const void* a);

void q5_K_to_float(const void* src, float* dst, int64_t n);
void q5_K_from_float(const float* src, void* dst, int64_t n);
float vec_dot_q5_K_q8_K(int64_t n, const void* w, const void* a);

void q6_K_to_float(const void* src, float* dst, int64_t n);
void q6_K_from_float(const float* src, void* dst, int64_t n);
float vec_dot_q6_K_q8_K(int64_t n, const void* w, const void* a);

void q2_K_to_float(const void* src, float* dst, int64_t n);
void q2_K_from_float(const float* src, void* dst, int64_t n);
float vec_dot_q2_K_q8_K(int64_t n, const void* w, const void* a);

void q3_K_to_float(const void* src, float* dst, int64_t n);
void q3_K_from_float(const float* src, void* dst, int64_t n);
float vec_dot_q3_K_q8_K(int64_t n, const void* w, const void* a);

void iq4_nl_to_float(const void* src, float* dst, int64_t n);
void iq4_nl_from_float(const float* src, void* dst, int64_t n);
float vec_dot_iq4_nl_q8_0(int64_t n, const void* w, const void* a);

void iq4_xs_to_float(const void* src, float* dst, int64_t n);
void iq4_xs_from_float(const float* src, void* dst, int64_t n);
float vec_dot_iq4_xs_q8_K(int64_t n, const void* w, const void* a);

void mxfp4_to_float(const void* src, float* dst, int64_t n);
void mxfp4_from_float(const float* src, void* dst, int64_t n);
float vec_dot_mxfp4_q8_0(int64_t n, const void* w, const void* a);

void q8_K_to_float(const void* src, float* dst, int64_t n);
void q8_K_from_float(const float* src, void* dst, int64_t n);

}  // namespace mnemo::kernels::scalar

// Element-wise and per-row operations of the transformer block, following ggml's numerics
// (double-accumulated RMS, iterated RoPE angles, table GELU) so outputs agree with llama.cpp.
#pragma once

#include <cstdint>
#include <span>

#include "kernels/cpu/type_kernels.h"

namespace mnemo::kernels {

// y = x / sqrt(mean(x^2) + eps) * weight; y may alias x. weight may be empty (no scaling).
void rms_norm(const float* x, std::span<const float> weight, float* y, int64_t n, float eps);

// The sum of squares rms_norm uses on `isa` (the scalar one is the reference; tests).
using SumOfSquaresFn = double (*)(const float* x, int64_t n);
SumOfSquaresFn sum_of_squares_kernel(Isa isa);

inline constexpr int32_t kMaxRopeDims = 1024;

enum class RopeMode { kNormal, kNeox };

struct RopeParams {
  RopeMode mode = RopeMode::kNormal;
  int32_t head_dim = 0;
  int32_t rope_dims = 0;  // leading dimensions rotated; the rest pass through
  float base = 10000.0f;
  float freq_scale = 1.0f;
  const float* freq_factors = nullptr;  // optional, rope_dims / 2 divisors of the angle
  // YaRN (ggml's rope_yarn): with ext_factor != 0, pair i's angle mixes the interpolated
  // (freq_scale) and the extrapolated angle by a ramp between the correction dimensions, and
  // cos/sin are scaled by mscale * (1 + 0.1 ln(1 / freq_scale)); otherwise by mscale alone.
  float ext_factor = 0.0f;
  float corr_low = 0.0f, corr_high = 0.0f;
  float mscale = 1.0f;
};

// Rotates n_heads vectors of head_dim at one position in place.
void rope(float* x, int32_t n_heads, int32_t position, const RopeParams& params);

// The same in two steps, so that Q and K of a token share one computation of the angles.
struct RopeAngles {
  float cos_sin[kMaxRopeDims];  // cos, sin of each rotated pair
};
void rope_angles(int32_t position, const RopeParams& params, RopeAngles& angles);
void rope_apply(float* x, int32_t n_heads, const RopeAngles& angles, const RopeParams& params);

// out[i] = gelu_tanh(gate[i]) * up[i], GELU through an F16 table as ggml does.
void geglu(const float* gate, const float* up, float* out, int64_t n);
// out[i] = silu(gate[i]) * up[i]
void swiglu(const float* gate, const float* up, float* out, int64_t n);

// x[i] = cap * tanh(x[i] / cap)
void softcap(float* x, int64_t n, float cap);

// y[i] += x[i]
void add_inplace(float* y, const float* x, int64_t n);

}  // namespace mnemo::kernels

#include "kernels/nn/ops.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "kernels/nn/f16_ops.h"
#include "util/fp16.h"

namespace mnemo::kernels {
namespace ops_avx512 {
double sum_of_squares(const float* x, int64_t n);
}  // namespace ops_avx512

namespace {

// Squares in float summed in double, as ggml does: long rows of large activations lose bits in a
// float sum. The scalar version adds in order; the SIMD one in 16 lanes (the float result of the
// norm is the same but for double roundings that land on a float rounding boundary).
double sum_of_squares_scalar(const float* x, int64_t n) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i] * x[i]);
  return sum;
}

}  // namespace

SumOfSquaresFn sum_of_squares_kernel(Isa isa) {
  return isa == Isa::kAvx512 && isa_supported(Isa::kAvx512) ? ops_avx512::sum_of_squares : sum_of_squares_scalar;
}

void rms_norm(const float* x, std::span<const float> weight, float* y, int64_t n, float eps) {
  static const SumOfSquaresFn sum_of_squares = sum_of_squares_kernel(detected_isa());
  const double sum = sum_of_squares(x, n);
  const float mean = static_cast<float>(sum / static_cast<double>(n));
  const float scale = 1.0f / std::sqrt(mean + eps);
  if (weight.empty()) {
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] * scale;
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = (x[i] * scale) * weight[static_cast<size_t>(i)];
  }
}

void rope_angles(int32_t position, const RopeParams& p, RopeAngles& angles) {
  const int32_t half = p.rope_dims / 2;
  // Angles by repeated multiplication, as ggml computes its rope cache, for bit-closeness.
  const float theta_scale = std::pow(p.base, -2.0f / static_cast<float>(p.rope_dims));
  float* cs = angles.cos_sin;
  float theta = static_cast<float>(position);
  const float mscale = p.ext_factor != 0.0f ? p.mscale * (1.0f + 0.1f * std::log(1.0f / p.freq_scale)) : p.mscale;
  for (int32_t i = 0; i < half; ++i) {
    const float extrapolated = p.freq_factors != nullptr ? theta / p.freq_factors[i] : theta;
    float angle = extrapolated * p.freq_scale;
    if (p.ext_factor != 0.0f) {
      const float y = (static_cast<float>(i) - p.corr_low) / std::max(0.001f, p.corr_high - p.corr_low);
      const float ramp_mix = (1.0f - std::min(1.0f, std::max(0.0f, y))) * p.ext_factor;
      angle = angle * (1.0f - ramp_mix) + extrapolated * ramp_mix;
    }
    cs[2 * i] = std::cos(angle) * mscale;
    cs[2 * i + 1] = std::sin(angle) * mscale;
    theta *= theta_scale;
  }
}

void rope_apply(float* x, int32_t n_heads, const RopeAngles& angles, const RopeParams& p) {
  const int32_t half = p.rope_dims / 2;
  const float* cs = angles.cos_sin;
  for (int32_t h = 0; h < n_heads; ++h) {
    float* v = x + static_cast<int64_t>(h) * p.head_dim;
    for (int32_t i = 0; i < half; ++i) {
      const int32_t a = p.mode == RopeMode::kNeox ? i : 2 * i;
      const int32_t b = p.mode == RopeMode::kNeox ? i + half : 2 * i + 1;
      const float x0 = v[a];
      const float x1 = v[b];
      v[a] = x0 * cs[2 * i] - x1 * cs[2 * i + 1];
      v[b] = x0 * cs[2 * i + 1] + x1 * cs[2 * i];
    }
  }
}

void rope(float* x, int32_t n_heads, int32_t position, const RopeParams& p) {
  RopeAngles angles;
  rope_angles(position, p, angles);
  rope_apply(x, n_heads, angles, p);
}

namespace {

float gelu_tanh(float x) {
  constexpr float kSqrt2OverPi = 0.79788456080286535587989211986876f;
  constexpr float kCoef = 0.044715f;
  return 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * x * (1.0f + kCoef * x * x)));
}

// GELU of every F16 value, rounded to F16: ggml evaluates GELU through this table.
const std::array<uint16_t, 65536>& gelu_table() {
  static const std::array<uint16_t, 65536> table = [] {
    std::array<uint16_t, 65536> t{};
    for (uint32_t i = 0; i < 65536; ++i) t[i] = fp32_to_fp16(gelu_tanh(fp16_to_fp32(static_cast<uint16_t>(i))));
    return t;
  }();
  return table;
}

}  // namespace

void geglu(const float* gate, const float* up, float* out, int64_t n) {
  static const F16Ops& ops = f16_ops();
  ops.geglu_table(gelu_table().data(), gate, up, out, n);
}

void swiglu(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void softcap(float* x, int64_t n, float cap) {
  for (int64_t i = 0; i < n; ++i) x[i] = cap * std::tanh(x[i] / cap);
}

void add_inplace(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

}  // namespace mnemo::kernels

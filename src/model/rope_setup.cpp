#include "model/rope_setup.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace mnemo {
namespace {

// YaRN's attention magnitude for a context `scale` times the original.
float yarn_mscale(float scale, float mscale) { return scale <= 1.0f ? 1.0f : 0.1f * mscale * std::log(scale) + 1.0f; }

// The dimension whose wavelength turns n_rot times over the original context.
float yarn_correction_dim(int32_t n_dims, int32_t n_ctx_orig, float n_rot, float base) {
  return static_cast<float>(n_dims) * std::log(static_cast<float>(n_ctx_orig) / (n_rot * 2.0f * std::numbers::pi_v<float>)) /
         (2.0f * std::log(base));
}

}  // namespace

kernels::RopeParams rope_params_for_layer(const ModelConfig& c, int32_t layer, const float* freq_factors) {
  const bool local = c.is_local(layer);
  kernels::RopeParams p{c.rope_style == RopeStyle::kNeox ? kernels::RopeMode::kNeox : kernels::RopeMode::kNormal,
                        c.head_dim_k,
                        c.rope_dims,
                        local ? c.rope_base_local : c.rope_base,
                        local ? c.rope_freq_scale_local : c.rope_freq_scale,
                        freq_factors};
  const RopeScaling& s = c.rope_scaling;
  float attn_factor = 1.0f;
  if (s.type == RopeScalingType::kYarn) {
    p.ext_factor = 1.0f;
    const float factor = 1.0f / c.rope_freq_scale;
    attn_factor = s.yarn_log_multiplier != 0.0f ? yarn_mscale(factor, 1.0f) / yarn_mscale(factor, s.yarn_log_multiplier)
                                                : yarn_mscale(factor, 1.0f);
    // The kernel multiplies by 1 + 0.1 ln(factor) again (ggml's rope_yarn); llama.cpp divides it
    // out here so that the product is the magnitude above.
    attn_factor *= 1.0f / (1.0f + 0.1f * std::log(factor));
    const float start = std::floor(yarn_correction_dim(c.rope_dims, s.original_context, s.yarn_beta_fast, p.base));
    const float end = std::ceil(yarn_correction_dim(c.rope_dims, s.original_context, s.yarn_beta_slow, p.base));
    p.corr_low = std::max(0.0f, start);
    p.corr_high = std::min(static_cast<float>(c.rope_dims - 1), end);
  }
  p.mscale = attn_factor * s.attn_factor;
  return p;
}

}  // namespace mnemo

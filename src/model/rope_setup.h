// The rotary embedding of each layer as the kernels take it (kernels/nn/ops.h): its kind's base
// and frequency scale, the frequency divisors, and YaRN's correction dimensions and magnitude
// scale derived as llama.cpp derives them for a context (llama_context's yarn_attn_factor and
// ggml_rope_yarn_corr_dims).
#pragma once

#include "kernels/nn/ops.h"
#include "model/config.h"

namespace mnemo {

// freq_factors: the model's divisors (rope_freqs, or LongRoPE's set for its context), or null.
kernels::RopeParams rope_params_for_layer(const ModelConfig& config, int32_t layer, const float* freq_factors);

}  // namespace mnemo

// Hyper-parameters of a supported architecture, read from GGUF metadata and validated. Each
// family has its own reader (model/arch_config.cpp) that sets the features its forward pass
// needs; the pass itself (model/forward.cpp) only looks at the features.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gguf/gguf_file.h"
#include "kv/kv_layout.h"
#include "util/result.h"

namespace mnemo {

enum class Arch { kLlama, kQwen2, kQwen3, kPhi3, kSmolLM3, kGranite, kMistral3, kGemma3 };

// How RoPE pairs dimensions: kNormal rotates (2i, 2i+1) (Llama), kNeox rotates (i, i + n_rot/2)
// (Gemma, Qwen, Phi-3).
enum class RopeStyle { kNormal, kNeox };

enum class FfnActivation { kSilu, kGeluTanh };

// Context extension of the rotary embedding (`<arch>.rope.scaling.*`), as llama.cpp applies it:
//   linear:   every angle times 1 / factor;
//   yarn:     angles interpolated by 1 / factor in the low-frequency dimensions only (a ramp
//             between the correction dimensions that yarn_beta_fast/slow set), and cos/sin
//             scaled by the attention factor 0.1 ln(factor) + 1 (or the yarn_log_multiplier
//             form);
//   longrope: per-dimension frequency divisors, the long set when the served context exceeds
//             the original one (tensors rope_factors_long/short), and cos/sin scaled by
//             attn_factor. Phi-3's files give the divisors and attn_factor without naming a
//             type; they read as linear with factor 1 plus those, which is the same thing.
enum class RopeScalingType { kNone, kLinear, kYarn, kLongRope };

struct RopeScaling {
  RopeScalingType type = RopeScalingType::kLinear;  // llama.cpp's default when the key is absent
  float factor = 1.0f;          // rope.scaling.factor (1: none given)
  int32_t original_context = 0; // rope.scaling.original_context_length (else the context length)
  float attn_factor = 1.0f;     // rope.scaling.attn_factor
  float yarn_beta_fast = 32.0f;
  float yarn_beta_slow = 1.0f;
  float yarn_log_multiplier = 0.0f;
};

struct ModelConfig {
  Arch arch = Arch::kLlama;
  std::string arch_name;  // as in general.architecture
  std::string name;       // general.name, if any

  int32_t n_layers = 0;
  int32_t n_embd = 0;
  int32_t n_ff = 0;
  int32_t n_heads = 0;
  int32_t n_kv_heads = 0;
  int32_t head_dim_k = 0;
  int32_t head_dim_v = 0;
  int32_t n_vocab = 0;
  int32_t context_length = 0;
  float rms_eps = 1e-5f;

  RopeStyle rope_style = RopeStyle::kNormal;
  int32_t rope_dims = 0;            // dimensions rotated per head (fewer than the head: partial rotary)
  float rope_base = 10000.0f;       // global (full-attention) layers
  float rope_freq_scale = 1.0f;     // 1 / scaling factor, global layers (linear and YaRN)
  float rope_base_local = 10000.0f;  // sliding-window layers
  float rope_freq_scale_local = 1.0f;
  RopeScaling rope_scaling;
  // Per layer: whether it rotates Q and K at all (SmolLM3 leaves every fourth layer without).
  std::vector<bool> layer_uses_rope;

  // 0: no sliding window. Otherwise a local layer at query position p sees keys at positions
  // (p - sliding_window, p].
  int32_t sliding_window = 0;
  std::vector<bool> layer_is_local;  // one per layer

  FfnActivation activation = FfnActivation::kSilu;
  bool has_qk_norm = false;          // Gemma 3, Qwen 3: RMS norm of each Q and K head
  bool has_post_norms = false;       // Gemma 3: norms after attention and after the FFN
  float embedding_scale = 1.0f;      // Gemma: sqrt(n_embd); Granite: embedding_scale
  float attention_scale = 0.0f;      // multiplies q.k; set from the head size when 0
  float residual_scale = 1.0f;       // Granite: each block's output times this before the residual add
  float logit_scale = 1.0f;          // Granite: the logits divided by this
  float final_logit_softcap = 0.0f;  // 0: off
  // Query temperature by position (Mistral 3, Llama 4): q times
  // 1 + attention_temperature_scale * ln(floor(pos / attention_temperature_length) + 1); 0: off.
  float attention_temperature_scale = 0.0f;
  int32_t attention_temperature_length = 0;

  bool is_local(int layer) const { return sliding_window > 0 && layer_is_local[static_cast<size_t>(layer)]; }
  bool uses_rope(int layer) const { return layer_uses_rope[static_cast<size_t>(layer)]; }
};

// Errors name the file and the key; unsupported architectures are refused by name.
Result<ModelConfig> read_model_config(const gguf::File& file);

// The architectures read_model_config accepts, for messages ("llama, mistral, ...").
std::string supported_architectures();

// The KV cache's layout for this model: what each block of `block_size` tokens holds.
KvLayout kv_layout_of(const ModelConfig& config, int32_t block_size, DType kv_dtype = DType::F16);

}  // namespace mnemo

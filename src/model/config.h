// Hyper-parameters of a supported architecture, read from GGUF metadata and validated.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gguf/gguf_file.h"
#include "kv/kv_layout.h"
#include "util/result.h"

namespace mnemo {

enum class Arch { kLlama, kGemma3 };

// How RoPE pairs dimensions: kNormal rotates (2i, 2i+1) (Llama), kNeox rotates (i, i + n_rot/2)
// (Gemma, Qwen 2).
enum class RopeStyle { kNormal, kNeox };

enum class FfnActivation { kSilu, kGeluTanh };

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
  int32_t rope_dims = 0;            // dimensions rotated per head
  float rope_base = 10000.0f;       // global (full-attention) layers
  float rope_freq_scale = 1.0f;     // 1 / linear scaling factor, global layers
  float rope_base_local = 10000.0f;  // sliding-window layers
  float rope_freq_scale_local = 1.0f;

  // 0: no sliding window. Otherwise a local layer at query position p sees keys at positions
  // (p - sliding_window, p].
  int32_t sliding_window = 0;
  std::vector<bool> layer_is_local;  // one per layer

  FfnActivation activation = FfnActivation::kSilu;
  bool has_qkv_bias = false;         // Qwen 2
  bool has_qk_norm = false;          // Gemma 3
  bool has_post_norms = false;       // Gemma 3: norms after attention and after the FFN
  float embedding_scale = 1.0f;      // Gemma: sqrt(n_embd)
  float attention_scale = 0.0f;      // multiplies q.k; set from the head size when 0
  float final_logit_softcap = 0.0f;  // 0: off

  bool is_local(int layer) const { return sliding_window > 0 && layer_is_local[static_cast<size_t>(layer)]; }
};

// Errors name the file and the key; unsupported architectures are refused by name.
Result<ModelConfig> read_model_config(const gguf::File& file);

// The KV cache's layout for this model: what each block of `block_size` tokens holds.
KvLayout kv_layout_of(const ModelConfig& config, int32_t block_size, DType kv_dtype = DType::F16);

}  // namespace mnemo

// The architecture readers: what each family's files say beyond the common keys, and the
// features its forward pass uses (as llama.cpp's per-architecture hyper-parameter loading).
#include <cmath>

#include "model/config_reader.h"

namespace mnemo::config_detail {

Status read_llama(const Reader&, ModelConfig& c) {
  c.rope_style = RopeStyle::kNormal;
  return ok_status();
}

Status read_qwen2(const Reader&, ModelConfig& c) {
  c.rope_style = RopeStyle::kNeox;  // and Q/K/V biases, which the loader takes where present
  return ok_status();
}

Status read_qwen3(const Reader&, ModelConfig& c) {
  c.rope_style = RopeStyle::kNeox;
  c.has_qk_norm = true;
  return ok_status();
}

// Phi-3 and Phi-4 (mini): fused attn_qkv and gate/up tensors (the loader splits them), partial
// rotary through rope.dimension_count, LongRoPE through rope_factors_long/short and
// rope.scaling.attn_factor. Its files may name a sliding window; llama.cpp ignores it (the
// converters do not give the layer pattern), and so does this reader, to compute the same thing.
Status read_phi3(const Reader&, ModelConfig& c) {
  c.rope_style = RopeStyle::kNeox;
  return ok_status();
}

// SmolLM3: no RoPE in every fourth layer (layers 3, 7, ...), a fixed rule of the architecture.
Status read_smollm3(const Reader&, ModelConfig& c) {
  constexpr int32_t kNoRopeLayerStep = 4;
  c.rope_style = RopeStyle::kNormal;
  for (int32_t il = 0; il < c.n_layers; ++il) c.layer_uses_rope[static_cast<size_t>(il)] = (il + 1) % kNoRopeLayerStep != 0;
  return ok_status();
}

// Granite 3.x: multipliers on the embedding, each block's output, the attention scores and the
// logits; rope.scaling.finetuned doubles as a switch for RoPE (on when absent).
Status read_granite(const Reader& r, ModelConfig& c) {
  c.rope_style = RopeStyle::kNormal;
  if (!r.has("logit_scale")) return make_error("{}: missing metadata '{}' for architecture granite", r.file.name(), r.key("logit_scale"));
  MNEMO_ASSIGN_OR_RETURN(c.logit_scale, r.positive_float_or("logit_scale", 1.0f));
  // 0 (or absent) means no multiplier, as llama.cpp reads these.
  MNEMO_ASSIGN_OR_RETURN(const float residual, r.float_or("residual_scale", 0.0f));
  c.residual_scale = residual == 0.0f ? 1.0f : residual;
  MNEMO_ASSIGN_OR_RETURN(const float embedding, r.float_or("embedding_scale", 0.0f));
  c.embedding_scale = embedding == 0.0f ? 1.0f : embedding;
  MNEMO_ASSIGN_OR_RETURN(c.attention_scale, r.float_or("attention.scale", 0.0f));
  if (c.attention_scale < 0.0f) return make_error("{}: '{}' must not be negative", r.file.name(), r.key("attention.scale"));
  MNEMO_ASSIGN_OR_RETURN(const bool rope_on, r.file.get_bool_or(r.key("rope.scaling.finetuned"), true));
  c.layer_uses_rope.assign(static_cast<size_t>(c.n_layers), rope_on);
  return ok_status();
}

// Ministral 3 / Mistral 3: YaRN (beta and log-multiplier keys read with the scaling), and a
// query temperature that grows with the position in steps of the original context.
Status read_mistral3(const Reader& r, ModelConfig& c) {
  c.rope_style = RopeStyle::kNormal;
  MNEMO_ASSIGN_OR_RETURN(c.attention_temperature_scale, r.float_or("attention.temperature_scale", 0.0f));
  if (c.attention_temperature_scale != 0.0f) c.attention_temperature_length = c.rope_scaling.original_context;
  MNEMO_ASSIGN_OR_RETURN(c.attention_scale, r.float_or("attention.scale", 0.0f));
  if (c.attention_scale < 0.0f) return make_error("{}: '{}' must not be negative", r.file.name(), r.key("attention.scale"));
  return ok_status();
}

Status read_gemma3(const Reader& r, ModelConfig& c) {
  c.rope_style = RopeStyle::kNeox;
  c.activation = FfnActivation::kGeluTanh;
  c.has_qk_norm = true;
  c.has_post_norms = true;
  c.embedding_scale = std::sqrt(static_cast<float>(c.n_embd));
  c.attention_scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim_k));
  MNEMO_ASSIGN_OR_RETURN(c.final_logit_softcap, r.float_or("final_logit_softcapping", 0.0f));
  MNEMO_ASSIGN_OR_RETURN(int64_t window, r.file.get_int_or(r.key("attention.sliding_window"), 0));
  if (window < 0 || window > (1 << 24)) return make_error("{}: sliding window {} out of range", r.file.name(), window);
  c.sliding_window = static_cast<int32_t>(window);
  if (c.sliding_window == 0) return ok_status();
  MNEMO_ASSIGN_OR_RETURN(c.rope_base_local, r.positive_float_or("rope.freq_base_swa", 10000.0f));
  c.rope_freq_scale_local = 1.0f;
  // The layer pattern: an explicit per-layer array, else every n-th layer is global (Gemma 3's
  // default n = 6: five local layers, then one global).
  const std::string pattern_key = r.key("attention.sliding_window_pattern");
  const gguf::Value* pattern = r.file.find(pattern_key);
  if (pattern != nullptr && pattern->type() == gguf::ValueType::kArray) {
    const auto& items = std::get<gguf::Array>(pattern->v).items;
    if (items.size() != static_cast<size_t>(c.n_layers)) {
      return make_error("{}: '{}' has {} entries for {} layers", r.file.name(), pattern_key, items.size(), c.n_layers);
    }
    for (size_t i = 0; i < items.size(); ++i) {
      const bool* local = std::get_if<bool>(&items[i].v);
      if (local == nullptr) return make_error("{}: '{}' must be an array of bools", r.file.name(), pattern_key);
      c.layer_is_local[i] = *local;
    }
    return ok_status();
  }
  MNEMO_ASSIGN_OR_RETURN(int64_t period, r.file.get_int_or(pattern_key, 6));
  if (period < 0 || period > c.n_layers + 1) return make_error("{}: '{}' = {} out of range", r.file.name(), pattern_key, period);
  for (int32_t il = 0; il < c.n_layers; ++il) {
    c.layer_is_local[static_cast<size_t>(il)] = period == 0 || (il % period < period - 1);
  }
  return ok_status();
}

}  // namespace mnemo::config_detail

#include "model/config.h"

#include <array>
#include <cmath>

#include "model/config_reader.h"

namespace mnemo {
namespace {

using config_detail::Reader;

struct ArchEntry {
  std::string_view name;
  Arch arch;
  Status (*read)(const Reader&, ModelConfig&);
};

// general.architecture values, each with its family's reader. "mistral" is the Llama layout
// under another name (Mistral 7B/Nemo/Small files).
constexpr std::array kArchitectures = {
    ArchEntry{"llama", Arch::kLlama, config_detail::read_llama},
    ArchEntry{"mistral", Arch::kLlama, config_detail::read_llama},
    ArchEntry{"qwen2", Arch::kQwen2, config_detail::read_qwen2},
    ArchEntry{"qwen3", Arch::kQwen3, config_detail::read_qwen3},
    ArchEntry{"phi3", Arch::kPhi3, config_detail::read_phi3},
    ArchEntry{"smollm3", Arch::kSmolLM3, config_detail::read_smollm3},
    ArchEntry{"granite", Arch::kGranite, config_detail::read_granite},
    ArchEntry{"mistral3", Arch::kMistral3, config_detail::read_mistral3},
    ArchEntry{"gemma3", Arch::kGemma3, config_detail::read_gemma3},
};

Status read_rope_scaling(const Reader& r, ModelConfig& c) {
  RopeScaling& s = c.rope_scaling;
  const std::string type_key = r.key("rope.scaling.type");
  if (r.file.has(type_key)) {
    MNEMO_ASSIGN_OR_RETURN(std::string type, r.file.get_string(type_key));
    if (type == "none") {
      s.type = RopeScalingType::kNone;
    } else if (type == "linear") {
      s.type = RopeScalingType::kLinear;
    } else if (type == "yarn") {
      s.type = RopeScalingType::kYarn;
    } else if (type == "longrope") {
      s.type = RopeScalingType::kLongRope;
    } else {
      return make_error("{}: '{}' = '{}' is not a supported RoPE scaling (none, linear, yarn, longrope)", r.file.name(),
                        type_key, type);
    }
  }
  // The older key name of the factor, as llama.cpp also reads it.
  const std::string_view factor_key = r.has("rope.scaling.factor") ? "rope.scaling.factor" : "rope.scale_linear";
  MNEMO_ASSIGN_OR_RETURN(float factor, r.float_or(factor_key, 0.0f));
  if (factor < 0.0f) return make_error("{}: RoPE scaling factor '{}' = {} is negative", r.file.name(), r.key(factor_key), factor);
  s.factor = factor == 0.0f ? 1.0f : factor;
  MNEMO_ASSIGN_OR_RETURN(s.original_context, r.positive_int_or("rope.scaling.original_context_length", c.context_length));
  MNEMO_ASSIGN_OR_RETURN(s.attn_factor, r.positive_float_or("rope.scaling.attn_factor", 1.0f));
  MNEMO_ASSIGN_OR_RETURN(s.yarn_beta_fast, r.float_or("rope.scaling.yarn_beta_fast", 32.0f));
  MNEMO_ASSIGN_OR_RETURN(s.yarn_beta_slow, r.float_or("rope.scaling.yarn_beta_slow", 1.0f));
  MNEMO_ASSIGN_OR_RETURN(s.yarn_log_multiplier, r.float_or("rope.scaling.yarn_log_multiplier", 0.0f));
  c.rope_freq_scale = s.type == RopeScalingType::kNone ? 1.0f : 1.0f / s.factor;
  return ok_status();
}

Status read_common(const Reader& r, ModelConfig& c) {
  MNEMO_ASSIGN_OR_RETURN(c.n_layers, r.positive_int("block_count"));
  MNEMO_ASSIGN_OR_RETURN(c.n_embd, r.positive_int("embedding_length"));
  MNEMO_ASSIGN_OR_RETURN(c.n_ff, r.positive_int("feed_forward_length"));
  MNEMO_ASSIGN_OR_RETURN(c.n_heads, r.positive_int("attention.head_count"));
  MNEMO_ASSIGN_OR_RETURN(c.n_kv_heads, r.positive_int_or("attention.head_count_kv", c.n_heads));
  MNEMO_ASSIGN_OR_RETURN(c.context_length, r.positive_int_or("context_length", 4096));
  MNEMO_ASSIGN_OR_RETURN(c.head_dim_k, r.positive_int_or("attention.key_length", c.n_embd / c.n_heads));
  MNEMO_ASSIGN_OR_RETURN(c.head_dim_v, r.positive_int_or("attention.value_length", c.head_dim_k));
  MNEMO_ASSIGN_OR_RETURN(c.rope_dims, r.positive_int_or("rope.dimension_count", c.head_dim_k));
  MNEMO_ASSIGN_OR_RETURN(float eps, r.float_or("attention.layer_norm_rms_epsilon", 1e-5f));
  c.rms_eps = eps;
  MNEMO_ASSIGN_OR_RETURN(c.rope_base, r.positive_float_or("rope.freq_base", 10000.0f));
  MNEMO_RETURN_IF_ERROR(read_rope_scaling(r, c));
  if (c.n_heads % c.n_kv_heads != 0) {
    return make_error("{}: {} attention heads are not a multiple of {} key/value heads", r.file.name(),
                      c.n_heads, c.n_kv_heads);
  }
  if (c.rope_dims > c.head_dim_k || c.rope_dims % 2 != 0) {
    return make_error("{}: rope dimension count {} does not fit head size {}", r.file.name(), c.rope_dims, c.head_dim_k);
  }
  c.layer_is_local.assign(static_cast<size_t>(c.n_layers), false);
  c.layer_uses_rope.assign(static_cast<size_t>(c.n_layers), true);
  return ok_status();
}

}  // namespace

std::string supported_architectures() {
  std::string names;
  for (const ArchEntry& entry : kArchitectures) {
    if (!names.empty()) names += ", ";
    names += entry.name;
  }
  return names;
}

Result<ModelConfig> read_model_config(const gguf::File& file) {
  ModelConfig c;
  MNEMO_ASSIGN_OR_RETURN(c.arch_name, file.get_string("general.architecture"));
  MNEMO_ASSIGN_OR_RETURN(c.name, file.get_string_or("general.name", ""));
  const ArchEntry* entry = nullptr;
  for (const ArchEntry& candidate : kArchitectures) {
    if (candidate.name == c.arch_name) entry = &candidate;
  }
  if (entry == nullptr) {
    return make_error("{}: architecture '{}' is not supported (supported: {})", file.name(), c.arch_name,
                      supported_architectures());
  }
  c.arch = entry->arch;
  const Reader reader{file, c.arch_name + "."};
  MNEMO_RETURN_IF_ERROR(read_common(reader, c));
  MNEMO_RETURN_IF_ERROR(entry->read(reader, c));
  if (c.attention_scale == 0.0f) c.attention_scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim_k));
  // The vocabulary size comes from the token list (checked against the embedding later).
  if (const gguf::Value* tokens = file.find("tokenizer.ggml.tokens"); tokens != nullptr) {
    if (const auto* array = std::get_if<gguf::Array>(&tokens->v)) c.n_vocab = static_cast<int32_t>(array->items.size());
  }
  return c;
}

KvLayout kv_layout_of(const ModelConfig& config, int32_t block_size, DType kv_dtype) {
  return KvLayout{config.n_layers, config.n_kv_heads, config.head_dim_k, config.head_dim_v, block_size, kv_dtype};
}

}  // namespace mnemo

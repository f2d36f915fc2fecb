#include "model/config.h"

#include <cmath>

namespace mnemo {
namespace {

struct Reader {
  const gguf::File& file;
  std::string prefix;  // "<arch>."

  std::string key(std::string_view suffix) const { return prefix + std::string(suffix); }

  Result<int32_t> positive_int(std::string_view suffix) const {
    MNEMO_ASSIGN_OR_RETURN(int64_t v, file.get_int(key(suffix)));
    if (v <= 0 || v > (1 << 24)) return make_error("{}: metadata '{}' = {} is out of range", file.name(), key(suffix), v);
    return static_cast<int32_t>(v);
  }
  Result<int32_t> positive_int_or(std::string_view suffix, int32_t fallback) const {
    if (!file.has(key(suffix))) return fallback;
    return positive_int(suffix);
  }
  Result<float> float_or(std::string_view suffix, float fallback) const {
    MNEMO_ASSIGN_OR_RETURN(double v, file.get_float_or(key(suffix), fallback));
    if (!std::isfinite(v)) return make_error("{}: metadata '{}' is not finite", file.name(), key(suffix));
    return static_cast<float>(v);
  }
};

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
  MNEMO_ASSIGN_OR_RETURN(c.rope_base, r.float_or("rope.freq_base", 10000.0f));
  if (r.file.has(r.key("rope.scaling.type"))) {
    MNEMO_ASSIGN_OR_RETURN(std::string type, r.file.get_string(r.key("rope.scaling.type")));
    if (type == "linear") {
      MNEMO_ASSIGN_OR_RETURN(float factor, r.float_or("rope.scaling.factor", 1.0f));
      if (factor <= 0) return make_error("{}: rope scaling factor {} must be positive", r.file.name(), factor);
      c.rope_freq_scale = 1.0f / factor;
    } else if (type != "none") {
      return make_error("{}: rope scaling type '{}' is not supported", r.file.name(), type);
    }
  }
  if (c.n_heads % c.n_kv_heads != 0) {
    return make_error("{}: {} attention heads are not a multiple of {} key/value heads", r.file.name(),
                      c.n_heads, c.n_kv_heads);
  }
  if (c.rope_dims > c.head_dim_k || c.rope_dims % 2 != 0) {
    return make_error("{}: rope dimension count {} does not fit head size {}", r.file.name(), c.rope_dims, c.head_dim_k);
  }
  c.layer_is_local.assign(static_cast<size_t>(c.n_layers), false);
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
  MNEMO_ASSIGN_OR_RETURN(c.rope_base_local, r.float_or("rope.freq_base_swa", 10000.0f));
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

}  // namespace

Result<ModelConfig> read_model_config(const gguf::File& file) {
  ModelConfig c;
  MNEMO_ASSIGN_OR_RETURN(c.arch_name, file.get_string("general.architecture"));
  MNEMO_ASSIGN_OR_RETURN(c.name, file.get_string_or("general.name", ""));
  if (c.arch_name == "gemma3") {
    c.arch = Arch::kGemma3;
  } else if (c.arch_name == "llama" || c.arch_name == "mistral" || c.arch_name == "qwen2") {
    c.arch = Arch::kLlama;
  } else {
    return make_error("{}: architecture '{}' is not supported (supported: llama, mistral, qwen2, gemma3)",
                      file.name(), c.arch_name);
  }
  const Reader reader{file, c.arch_name + "."};
  MNEMO_RETURN_IF_ERROR(read_common(reader, c));
  if (c.arch == Arch::kGemma3) {
    MNEMO_RETURN_IF_ERROR(read_gemma3(reader, c));
  } else if (c.arch_name == "qwen2") {
    c.rope_style = RopeStyle::kNeox;
    c.has_qkv_bias = true;
  }
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

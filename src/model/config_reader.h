// Typed, range-checked reads of `<arch>.` metadata keys, shared by the architecture readers
// (model/config.cpp, model/arch_config.cpp). Errors name the file and the key.
#pragma once

#include <cmath>
#include <string>
#include <string_view>

#include "gguf/gguf_file.h"
#include "model/config.h"
#include "util/result.h"

namespace mnemo::config_detail {

struct Reader {
  const gguf::File& file;
  std::string prefix;  // "<arch>."

  std::string key(std::string_view suffix) const { return prefix + std::string(suffix); }
  bool has(std::string_view suffix) const { return file.has(key(suffix)); }

  Result<int32_t> positive_int(std::string_view suffix) const {
    MNEMO_ASSIGN_OR_RETURN(int64_t v, file.get_int(key(suffix)));
    if (v <= 0 || v > (1 << 24)) return make_error("{}: metadata '{}' = {} is out of range", file.name(), key(suffix), v);
    return static_cast<int32_t>(v);
  }
  Result<int32_t> positive_int_or(std::string_view suffix, int32_t fallback) const {
    if (!has(suffix)) return fallback;
    return positive_int(suffix);
  }
  Result<float> float_or(std::string_view suffix, float fallback) const {
    MNEMO_ASSIGN_OR_RETURN(double v, file.get_float_or(key(suffix), fallback));
    if (!std::isfinite(v)) return make_error("{}: metadata '{}' is not finite", file.name(), key(suffix));
    return static_cast<float>(v);
  }
  // A float that must be > 0 when present (scales a file could set to 0 or less by mistake).
  Result<float> positive_float_or(std::string_view suffix, float fallback) const {
    MNEMO_ASSIGN_OR_RETURN(float v, float_or(suffix, fallback));
    if (!(v > 0.0f)) return make_error("{}: metadata '{}' = {} must be positive", file.name(), key(suffix), v);
    return v;
  }
};

// The per-family readers (model/arch_config.cpp), run after the common keys are read.
Status read_llama(const Reader& r, ModelConfig& c);
Status read_qwen2(const Reader& r, ModelConfig& c);
Status read_qwen3(const Reader& r, ModelConfig& c);
Status read_phi3(const Reader& r, ModelConfig& c);
Status read_smollm3(const Reader& r, ModelConfig& c);
Status read_granite(const Reader& r, ModelConfig& c);
Status read_mistral3(const Reader& r, ModelConfig& c);
Status read_gemma3(const Reader& r, ModelConfig& c);

}  // namespace mnemo::config_detail

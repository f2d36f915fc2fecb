// What a request that leaves temperature, top_k, top_p or min_p out samples with. Each comes from
// `serve`'s flag if given, else from the model file's general.sampling.* key (the model's
// authors' recommendation) where present, else llama-server's default: temperature 0.8, top-k
// 40, top-p 0.95, min-p 0.05. (OpenAI's temperature 1.0 with no cut over a 262k vocabulary
// draws too often from its long tail.)
#pragma once

#include <optional>
#include <string>

#include "gguf/gguf_file.h"
#include "util/result.h"

namespace mnemo::server {

struct SamplingDefaults {
  float temperature = 0.8f;
  int32_t top_k = 40;
  float top_p = 0.95f;
  float min_p = 0.05f;
  std::string source = "llama-server's defaults";  // for the start-up line
};

// `serve`'s flags: set ones win.
struct SamplingFlags {
  std::optional<float> temperature;
  std::optional<int32_t> top_k;
  std::optional<float> top_p;
  std::optional<float> min_p;
};

// The defaults for this model: flags, then its general.sampling.{temp,top_k,top_p,min_p}, then
// llama-server's. An Error for a key of the wrong type or out of range.
Result<SamplingDefaults> sampling_defaults_for(const gguf::File& file, const SamplingFlags& flags);

}  // namespace mnemo::server

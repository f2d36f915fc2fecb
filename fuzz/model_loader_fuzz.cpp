// libFuzzer target for the model loader: any input that parses as GGUF goes through the
// architecture readers (model/config.cpp, model/arch_config.cpp) and the weight loader
// (model/weights.cpp: fused tensors split, optional biases, RoPE factor sets). Each must load or
// fail with an Error; a config that reads must be one the forward pass can run (positive sizes,
// heads that group, rotary dimensions within the head, one flag per layer). Seeds: a one-layer
// model of every architecture (fuzz/corpus/model, written by mnemo_tiny_model ... small).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>

#include "gguf/gguf_file.h"
#include "model/config.h"
#include "model/weights.h"

namespace {

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "model_loader_fuzz: %s\n", what);
  std::abort();
}

void check_config(const mnemo::ModelConfig& c) {
  if (c.n_layers <= 0 || c.n_embd <= 0 || c.n_ff <= 0 || c.n_heads <= 0 || c.n_kv_heads <= 0) fail("a size is not positive");
  if (c.n_heads % c.n_kv_heads != 0) fail("query heads do not group over the key/value heads");
  if (c.rope_dims > c.head_dim_k || c.rope_dims % 2 != 0) fail("rotary dimensions do not fit the head");
  if (c.layer_uses_rope.size() != static_cast<size_t>(c.n_layers) || c.layer_is_local.size() != static_cast<size_t>(c.n_layers)) {
    fail("per-layer flags do not cover the layers");
  }
  if (!(c.rope_freq_scale > 0.0f) || !(c.logit_scale > 0.0f) || !(c.rope_scaling.attn_factor > 0.0f)) fail("a scale is not positive");
  if (c.attention_temperature_scale != 0.0f && c.attention_temperature_length <= 0) fail("a temperature without its step");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = mnemo::gguf::File::parse(std::span<const uint8_t>(data, size), "fuzz.gguf");
  if (!file.ok()) return 0;
  auto config = mnemo::read_model_config(*file);
  if (!config.ok()) {
    if (config.error().message().rfind("fuzz.gguf", 0) != 0) fail("a config error does not name the file");
    return 0;
  }
  check_config(*config);
  mnemo::LoadOptions options;
  options.prepack_budget_bytes = 0;  // the kernels' tile layouts are not the loader's concern
  auto weights = mnemo::load_weights(*file, *config, options);
  if (!weights.ok() && weights.error().message().rfind("fuzz.gguf", 0) != 0) fail("a weight error does not name the file");
  return 0;
}

// Tiny synthetic models of each supported architecture, written with the project's GGUF writer
// from seeded random weights in a mix of quantised types. Used where a test needs a model but
// not the real one (the real one is tested in addition, never instead).
#pragma once

#include <cstdint>
#include <memory>
#include <ostream>
#include <string>

#include "gguf/gguf_writer.h"
#include "model/config.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace mnemo::testing {

struct TinyModelSpec {
  Arch arch = Arch::kLlama;
  int32_t n_layers = 3;
  int32_t n_embd = 64;
  int32_t n_heads = 4;
  int32_t n_kv_heads = 2;
  int32_t head_dim = 16;
  int32_t n_ff = 256;
  int32_t n_vocab = 96;
  int32_t context_length = 512;
  int32_t sliding_window = 8;     // gemma3 only
  int32_t swa_pattern = 3;        // gemma3 only: every third layer is global
  bool qkv_bias = false;          // llama family: as Qwen 2 (architecture "qwen2"); also on for kQwen2
  // The other architectures add their own features (tiny_model.cpp): Qwen 3 QK-norm; Phi-3 fused
  // QKV and gate/up, partial rotary and LongRoPE factors; SmolLM3 NoPE layers; Granite's
  // multipliers and biases; Mistral 3 YaRN and query temperature.
  uint64_t seed = 1;
  // Adds a SentencePiece vocabulary: <unk> <s> </s>, the 256 byte tokens, then letter pieces up
  // to n_vocab (which must then be at least 260), so the model can be served end to end.
  bool with_tokenizer = false;
};

// For readable parameterised test names and failure messages.
// general.architecture of the spec's model.
std::string tiny_arch_name(const TinyModelSpec& spec);

inline void PrintTo(const TinyModelSpec& spec, std::ostream* os) { *os << tiny_arch_name(spec) << " seed " << spec.seed; }

// A GGUF writer filled with the model (metadata and tensors); add more metadata before writing.
gguf::Writer make_tiny_model(const TinyModelSpec& spec);

// Writes the model to a fresh file under the test temp dir and returns its path.
std::string write_tiny_model(const TinyModelSpec& spec, const std::string& name);

// The tiny SentencePiece vocabulary of `n_vocab` tokens (at least 260: <unk> <s> </s>, the 256
// byte tokens at ids 3..258, then letter pieces) as a tokenizer; a test failure and null if it
// cannot be made. For tests of the API layer, which need a tokenizer but no model.
std::unique_ptr<Tokenizer> tiny_tokenizer(int32_t n_vocab = 300);

// A tiny model written, loaded (its file then removed) and its tokenizer, for tests that run the
// engine on it (`spec.with_tokenizer`); a test failure and nulls if either cannot be made.
struct LoadedTinyModel {
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
};
LoadedTinyModel load_tiny_model(const TinyModelSpec& spec, const std::string& name);

}  // namespace mnemo::testing

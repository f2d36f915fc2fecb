#include "support/tiny_model.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <random>

#include <fmt/format.h>
#include <vector>

#include "kernels/cpu/type_kernels.h"

namespace mnemo::testing {
namespace {

class TensorMaker {
 public:
  TensorMaker(gguf::Writer& writer, uint64_t seed) : writer_(writer), rng_(seed) {}

  // A [rows x cols] matrix of N(0, scale^2) values stored as `type`.
  void matrix(const std::string& name, DType type, int64_t cols, int64_t rows, float scale) {
    std::vector<float> values(static_cast<size_t>(cols * rows));
    std::normal_distribution<float> dist(0.0f, scale);
    for (float& v : values) v = dist(rng_);
    store(name, type, {cols, rows}, values);
  }

  // A vector near `center` (norm weights) or near 0 (biases).
  void vector(const std::string& name, int64_t n, float center, float spread) {
    std::vector<float> values(static_cast<size_t>(n));
    std::uniform_real_distribution<float> dist(center - spread, center + spread);
    for (float& v : values) v = dist(rng_);
    store(name, DType::F32, {n}, values);
  }

 private:
  void store(const std::string& name, DType type, std::vector<int64_t> dims, const std::vector<float>& values) {
    const kernels::TypeKernels* k = kernels::type_kernels(type);
    ASSERT_NE(k, nullptr) << dtype_name(type);
    std::vector<uint8_t> bytes(row_bytes(type, dims[0]) * static_cast<size_t>(values.size() / static_cast<size_t>(dims[0])));
    k->from_float(values.data(), bytes.data(), static_cast<int64_t>(values.size()));
    const Status s = writer_.add_tensor(name, type, std::move(dims), bytes);
    ASSERT_TRUE(s.ok()) << s.error().message();
  }

  gguf::Writer& writer_;
  std::mt19937_64 rng_;
};

void add_tiny_vocabulary(gguf::Writer& w, int32_t n_vocab) {
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<int32_t> types = {2, 3, 3};
  for (int b = 0; b < 256; ++b) {
    tokens.push_back(fmt::format("<0x{:02X}>", b));
    types.push_back(6);
  }
  for (int32_t i = 0; static_cast<int32_t>(tokens.size()) < n_vocab; ++i) {
    // Pieces "▁a", "▁b", ..., then "a", "b", ...: enough for text to round-trip through them.
    std::string piece;
    if (i < 26) {
      piece = "\xe2\x96\x81";
      piece.push_back(static_cast<char>('a' + i));
    } else {
      piece.push_back(static_cast<char>('a' + (i - 26) % 26));
      piece += std::to_string((i - 26) / 26);
    }
    tokens.push_back(piece);
    types.push_back(1);
  }
  std::vector<float> scores(tokens.size(), 0.0f);
  for (size_t i = 0; i < scores.size(); ++i) scores[i] = -static_cast<float>(i);
  w.set_string("tokenizer.ggml.model", "llama");
  w.set_string_array("tokenizer.ggml.tokens", tokens);
  w.set_f32_array("tokenizer.ggml.scores", scores);
  w.set_i32_array("tokenizer.ggml.token_type", types);
  w.set_u32("tokenizer.ggml.unknown_token_id", 0);
  w.set_u32("tokenizer.ggml.bos_token_id", 1);
  w.set_u32("tokenizer.ggml.eos_token_id", 2);
  w.set_bool("tokenizer.ggml.add_bos_token", true);
}

}  // namespace

std::string tiny_arch_name(const TinyModelSpec& s) {
  switch (s.arch) {
    case Arch::kLlama: return s.qkv_bias ? "qwen2" : "llama";
    case Arch::kQwen2: return "qwen2";
    case Arch::kQwen3: return "qwen3";
    case Arch::kPhi3: return "phi3";
    case Arch::kSmolLM3: return "smollm3";
    case Arch::kGranite: return "granite";
    case Arch::kMistral3: return "mistral3";
    case Arch::kGemma3: return "gemma3";
  }
  return "llama";
}

gguf::Writer make_tiny_model(const TinyModelSpec& s) {
  gguf::Writer w;
  const bool gemma = s.arch == Arch::kGemma3;
  const bool phi3 = s.arch == Arch::kPhi3;
  const bool granite = s.arch == Arch::kGranite;
  const bool qkv_bias = s.qkv_bias || s.arch == Arch::kQwen2;
  const std::string arch = tiny_arch_name(s);
  const std::string p = arch + ".";
  w.set_string("general.architecture", arch);
  w.set_string("general.name", "tiny-" + arch);
  w.set_u32(p + "block_count", static_cast<uint32_t>(s.n_layers));
  w.set_u32(p + "embedding_length", static_cast<uint32_t>(s.n_embd));
  w.set_u32(p + "feed_forward_length", static_cast<uint32_t>(s.n_ff));
  w.set_u32(p + "attention.head_count", static_cast<uint32_t>(s.n_heads));
  w.set_u32(p + "attention.head_count_kv", static_cast<uint32_t>(s.n_kv_heads));
  w.set_u32(p + "attention.key_length", static_cast<uint32_t>(s.head_dim));
  w.set_u32(p + "attention.value_length", static_cast<uint32_t>(s.head_dim));
  w.set_u32(p + "context_length", static_cast<uint32_t>(s.context_length));
  w.set_f32(p + "attention.layer_norm_rms_epsilon", 1e-6f);
  w.set_f32(p + "rope.freq_base", gemma ? 1000000.0f : 10000.0f);
  if (gemma) {
    w.set_u32(p + "attention.sliding_window", static_cast<uint32_t>(s.sliding_window));
    w.set_u32(p + "attention.sliding_window_pattern", static_cast<uint32_t>(s.swa_pattern));
  }
  // Context extension and the other families' multipliers, at values that change the output
  // within a tiny model's context (an original context of 64 positions).
  const int32_t rotated = phi3 ? s.head_dim * 3 / 4 : s.head_dim;  // Phi-4-mini rotates 3/4 of each head
  if (phi3) {
    w.set_u32(p + "rope.dimension_count", static_cast<uint32_t>(rotated));
    w.set_u32(p + "rope.scaling.original_context_length", 64);
    w.set_f32(p + "rope.scaling.attn_factor", 1.19f);
  }
  if (s.arch == Arch::kMistral3) {
    w.set_string(p + "rope.scaling.type", "yarn");
    w.set_f32(p + "rope.scaling.factor", 8.0f);
    w.set_u32(p + "rope.scaling.original_context_length", 64);
    w.set_f32(p + "rope.scaling.yarn_beta_fast", 32.0f);
    w.set_f32(p + "rope.scaling.yarn_beta_slow", 1.0f);
    w.set_f32(p + "rope.scaling.yarn_log_multiplier", 1.0f);
    w.set_f32(p + "attention.temperature_scale", 0.1f);
  }
  if (granite) {
    w.set_f32(p + "logit_scale", 8.0f);
    w.set_f32(p + "residual_scale", 0.22f);
    w.set_f32(p + "embedding_scale", 12.0f);
    w.set_f32(p + "attention.scale", 0.015625f);
  }

  if (s.with_tokenizer) add_tiny_vocabulary(w, s.n_vocab);

  TensorMaker make(w, s.seed);
  const int64_t q_dim = static_cast<int64_t>(s.n_heads) * s.head_dim;
  const int64_t kv_dim = static_cast<int64_t>(s.n_kv_heads) * s.head_dim;
  make.matrix("token_embd.weight", DType::Q8_0, s.n_embd, s.n_vocab, 1.0f);
  make.vector("output_norm.weight", s.n_embd, 1.0f, 0.2f);
  if (!gemma) make.matrix("output.weight", s.n_embd % 256 == 0 ? DType::Q6_K : DType::F16, s.n_embd, s.n_vocab, 0.2f);
  if (phi3) {
    make.vector("rope_factors_long.weight", rotated / 2, 3.0f, 2.0f);
    make.vector("rope_factors_short.weight", rotated / 2, 1.0f, 0.05f);
  }
  const float in_scale = 1.0f / std::sqrt(static_cast<float>(s.n_embd));
  const float ff_scale = 1.0f / std::sqrt(static_cast<float>(s.n_ff));
  for (int32_t il = 0; il < s.n_layers; ++il) {
    const std::string b = "blk." + std::to_string(il) + ".";
    make.vector(b + "attn_norm.weight", s.n_embd, 1.0f, 0.2f);
    // Vary the types across layers so every kernel path runs inside the model.
    const DType qkv_type = il % 3 == 0 ? DType::Q5_0 : (il % 3 == 1 ? DType::Q4_0 : DType::F16);
    if (phi3) {
      make.matrix(b + "attn_qkv.weight", qkv_type, s.n_embd, q_dim + 2 * kv_dim, in_scale);
    } else {
      make.matrix(b + "attn_q.weight", qkv_type, s.n_embd, q_dim, in_scale);
      make.matrix(b + "attn_k.weight", qkv_type, s.n_embd, kv_dim, in_scale);
      make.matrix(b + "attn_v.weight", DType::Q8_0, s.n_embd, kv_dim, in_scale);
    }
    make.matrix(b + "attn_output.weight", il % 2 == 0 ? DType::BF16 : DType::F32, q_dim, s.n_embd,
                1.0f / std::sqrt(static_cast<float>(q_dim)));
    if (granite) {
      make.vector(b + "attn_output.bias", s.n_embd, 0.0f, 0.1f);
      make.vector(b + "ffn_gate.bias", s.n_ff, 0.0f, 0.1f);
      make.vector(b + "ffn_up.bias", s.n_ff, 0.0f, 0.1f);
      make.vector(b + "ffn_down.bias", s.n_embd, 0.0f, 0.1f);
    }
    if (s.arch == Arch::kQwen3) {
      make.vector(b + "attn_q_norm.weight", s.head_dim, 1.0f, 0.2f);
      make.vector(b + "attn_k_norm.weight", s.head_dim, 1.0f, 0.2f);
    }
    if (qkv_bias) {
      make.vector(b + "attn_q.bias", q_dim, 0.0f, 0.1f);
      make.vector(b + "attn_k.bias", kv_dim, 0.0f, 0.1f);
      make.vector(b + "attn_v.bias", kv_dim, 0.0f, 0.1f);
    }
    if (gemma) {
      make.vector(b + "attn_q_norm.weight", s.head_dim, 1.0f, 0.2f);
      make.vector(b + "attn_k_norm.weight", s.head_dim, 1.0f, 0.2f);
      make.vector(b + "post_attention_norm.weight", s.n_embd, 1.0f, 0.2f);
      make.vector(b + "post_ffw_norm.weight", s.n_embd, 1.0f, 0.2f);
    }
    make.vector(b + "ffn_norm.weight", s.n_embd, 1.0f, 0.2f);
    if (phi3) {
      make.matrix(b + "ffn_up.weight", DType::Q8_0, s.n_embd, 2 * s.n_ff, in_scale);
    } else {
      make.matrix(b + "ffn_gate.weight", DType::Q5_0, s.n_embd, s.n_ff, in_scale);
      make.matrix(b + "ffn_up.weight", DType::Q8_0, s.n_embd, s.n_ff, in_scale);
    }
    const DType down_type = s.n_ff % 256 == 0 ? (il % 3 == 0 ? DType::Q6_K : (il % 3 == 1 ? DType::Q4_K : DType::Q5_K))
                                              : DType::Q8_0;
    make.matrix(b + "ffn_down.weight", down_type, s.n_ff, s.n_embd, ff_scale);
  }
  return w;
}

std::string write_tiny_model(const TinyModelSpec& spec, const std::string& name) {
  // Unique per process and call: ctest runs tests in parallel processes, and rewriting a file
  // another process has mapped would pull its pages away (SIGBUS).
  static int counter = 0;
  const std::string path = ::testing::TempDir() + "/" + name + "-" + std::to_string(::getpid()) + "-" +
                           std::to_string(counter++) + ".gguf";
  const Status s = make_tiny_model(spec).write(path);
  EXPECT_TRUE(s.ok()) << s.error().message();
  return path;
}

std::unique_ptr<Tokenizer> tiny_tokenizer(int32_t n_vocab) {
  gguf::Writer w;
  w.set_string("general.architecture", "llama");
  add_tiny_vocabulary(w, n_vocab);
  auto file = gguf::File::parse(w.to_bytes(), "tiny-vocabulary");
  EXPECT_TRUE(file.ok()) << file.error().message();
  if (!file.ok()) return nullptr;
  auto tokenizer = Tokenizer::from_gguf(*file);
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.error().message();
  return tokenizer.ok() ? std::move(*tokenizer) : nullptr;
}

LoadedTinyModel load_tiny_model(const TinyModelSpec& spec, const std::string& name) {
  const std::string path = write_tiny_model(spec, name);
  auto model = Model::load(path);
  std::remove(path.c_str());
  EXPECT_TRUE(model.ok()) << model.error().message();
  if (!model.ok()) return {};
  auto tokenizer = Tokenizer::from_gguf((*model)->file());
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.error().message();
  if (!tokenizer.ok()) return {};
  return {std::move(*model), std::move(*tokenizer)};
}

}  // namespace mnemo::testing

// libFuzzer target for the OpenAI request parsers (server/openai_request.h, server/embeddings.h),
// which read what any client sends: the first byte picks chat completions (odd) or completions
// (even), or embeddings (bit 1 set, then the body is read as /v1/embeddings'), the rest is the
// body. parse_request must answer a ParsedRequest or an ApiError; never crash, throw, or
// accept values outside the ranges it promises. Whatever it accepts must also be accepted after a
// round trip through parse_bounded_json and dump() (the body as the server would re-read it).
// Seeds: fuzz/corpus/openai (each file's first byte is the selector); dictionary: fuzz/openai.dict.
//   build/fuzz/fuzz/openai_request_fuzz fuzz/corpus/openai -dict=fuzz/openai.dict -max_len=4096 -max_total_time=120
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <variant>

#include <nlohmann/json.hpp>

#include "api_error_check.h"

#include "gguf/gguf_writer.h"
#include "server/embeddings.h"
#include "server/openai_request.h"
#include "tokenizer/tokenizer.h"
#include "util/bounded_json.h"

namespace {

using mnemo::server::ApiError;
using mnemo::server::ParsedRequest;

constexpr const char* kTarget = "openai_request_fuzz";

[[noreturn]] void fail(const char* what) { mnemo::fuzz::fail(kTarget, what); }

// parse_request over the raw body. It has taken `const std::string&`, and takes a string_view
// (beside a `const json&` overload, which a std::string argument would make ambiguous) since
// bodies are parsed within bounds; this compiles against either. `String` is a template parameter
// only so that the overload test below is a dependent expression, checked when instantiated.
template <class String>
std::variant<ParsedRequest, ApiError> parse_raw(const String& body, bool chat) {
  using View = std::basic_string_view<typename String::value_type>;
  if constexpr (requires { mnemo::server::parse_request(View(body), chat); }) {
    return mnemo::server::parse_request(View(body), chat);
  } else {
    return mnemo::server::parse_request(body, chat);
  }
}

void check(const ParsedRequest& r, bool chat) {
  const auto& g = r.generation;
  if (chat) {
    if (r.messages.empty()) fail("a chat request without messages was accepted");
    for (const auto& m : r.messages) {
      if (m.role != "system" && m.role != "user" && m.role != "assistant" && m.role != "tool") fail("an unknown role was accepted");
    }
  } else if (!r.messages.empty()) {
    fail("a completions request has chat messages");
  }
  if (r.max_tokens_given && (g.max_tokens < 1 || g.max_tokens > (1 << 20))) fail("max_tokens out of range");
  if (!(g.sampling.temperature >= 0.0f && g.sampling.temperature <= 2.0f)) fail("temperature out of range");
  if (!(g.sampling.top_p >= 0.0f && g.sampling.top_p <= 1.0f)) fail("top_p out of range");
  if (!(g.sampling.min_p >= 0.0f && g.sampling.min_p <= 1.0f)) fail("min_p out of range");
  if (g.n < 1 || g.n > 128) fail("n out of range");
  if (g.stop.size() > 16) fail("more than 16 stop strings");
  if (g.top_logprobs < -1 || g.top_logprobs > 20) fail("top_logprobs out of range");
  if (r.replica_endpoints.size() > 8 || r.replica_known_tokens.size() > 8 || r.replica_at_end.size() > 8) {
    fail("more than 8 replicas");
  }
  for (const auto id : r.prompt_tokens) {
    if (id < 0) fail("a negative prompt token was accepted");
  }
  for (const auto id : g.resume_tokens) {
    if (id < 0) fail("a negative resume token was accepted");
  }
}

void check(const ApiError& e) { mnemo::fuzz::check_api_error(kTarget, e); }

// A SentencePiece vocabulary of 300 tokens (bytes and letters), built once in memory.
const mnemo::Tokenizer& tokenizer() {
  static const std::unique_ptr<mnemo::Tokenizer> made = [] {
    std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
    std::vector<int32_t> types = {2, 3, 3};
    for (int b = 0; b < 256; ++b) {
      char piece[8];
      std::snprintf(piece, sizeof(piece), "<0x%02X>", b);
      tokens.emplace_back(piece);
      types.push_back(6);
    }
    for (int i = 0; tokens.size() < 300; ++i) {
      tokens.push_back(std::string("\xe2\x96\x81") + static_cast<char>('a' + i % 26) + std::to_string(i / 26));
      types.push_back(1);
    }
    std::vector<float> scores(tokens.size());
    for (size_t i = 0; i < scores.size(); ++i) scores[i] = -static_cast<float>(i);
    mnemo::gguf::Writer w;
    w.set_string("general.architecture", "llama");
    w.set_string("tokenizer.ggml.model", "llama");
    w.set_string_array("tokenizer.ggml.tokens", tokens);
    w.set_f32_array("tokenizer.ggml.scores", scores);
    w.set_i32_array("tokenizer.ggml.token_type", types);
    w.set_u32("tokenizer.ggml.unknown_token_id", 0);
    w.set_u32("tokenizer.ggml.bos_token_id", 1);
    w.set_u32("tokenizer.ggml.eos_token_id", 2);
    auto file = mnemo::gguf::File::parse(w.to_bytes(), "fuzz-vocabulary");
    if (!file.ok()) fail("the fuzzer's vocabulary does not parse");
    auto t = mnemo::Tokenizer::from_gguf(*file);
    if (!t.ok()) fail("the fuzzer's vocabulary is refused");
    return std::move(*t);
  }();
  return *made;
}

// /v1/embeddings: every accepted input is non-empty, shorter than the context, inside the
// vocabulary, and all of them within OpenAI's bounds.
void check_embeddings(const std::string& body) {
  auto json = mnemo::parse_bounded_json(body);
  if (!json.ok()) return;  // the server answers 400 before reading further
  constexpr int32_t kContext = 64;
  const auto result = mnemo::server::read_embedding_request(*json, tokenizer(), kContext, 8);
  if (const auto* error = std::get_if<ApiError>(&result)) {
    check(*error);
    return;
  }
  const auto& request = std::get<mnemo::server::EmbeddingRequest>(result);
  if (request.inputs.empty() || request.inputs.size() > mnemo::server::kMaxEmbeddingInputs) fail("input count out of bounds");
  int64_t total = 0;
  for (const auto& input : request.inputs) {
    if (input.empty() || static_cast<int32_t>(input.size()) >= kContext) fail("an input out of bounds was accepted");
    for (const auto id : input) {
      if (id < 0 || id >= tokenizer().vocab_size()) fail("a token outside the vocabulary was accepted");
    }
    total += static_cast<int64_t>(input.size());
  }
  if (total > mnemo::server::kMaxEmbeddingTokens) fail("more tokens than a request may hold");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  if ((data[0] & 2) != 0) {
    check_embeddings(std::string(reinterpret_cast<const char*>(data) + 1, size - 1));
    return 0;
  }
  const bool chat = (data[0] & 1) != 0;
  const std::string body(reinterpret_cast<const char*>(data) + 1, size - 1);

  const auto result = parse_raw(body, chat);
  if (const auto* error = std::get_if<ApiError>(&result)) {
    check(*error);
    return 0;
  }
  check(std::get<ParsedRequest>(result), chat);

  // An accepted body, parsed and written back as JSON, reads the same way.
  auto json = mnemo::parse_bounded_json(body);
  if (!json.ok()) fail("parse_request accepted a body parse_bounded_json refuses");
  // Token ids are taken as themselves: none wraps into another (valid) id.
  const auto& tokens = std::get<ParsedRequest>(result).prompt_tokens;
  if (!tokens.empty()) {
    const nlohmann::json& prompt = (*json)["prompt"];
    if (!prompt.is_array() || prompt.size() != tokens.size()) fail("prompt tokens that are not the prompt");
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (prompt[i].is_number_unsigned() ? prompt[i].get<uint64_t>() != static_cast<uint64_t>(tokens[i])
                                         : prompt[i].get<int64_t>() != tokens[i]) {
        fail("a prompt token id wrapped into another");
      }
    }
  }
  const auto again = parse_raw(json->dump(), chat);
  if (!std::holds_alternative<ParsedRequest>(again)) fail("the dumped body is refused");
  const auto& a = std::get<ParsedRequest>(result);
  const auto& b = std::get<ParsedRequest>(again);
  if (a.model != b.model || a.prompt_text != b.prompt_text || a.prompt_tokens != b.prompt_tokens ||
      a.messages.size() != b.messages.size() || a.generation.stop != b.generation.stop ||
      a.generation.max_tokens != b.generation.max_tokens || a.generation.sampling.seed != b.generation.sampling.seed) {
    fail("the dumped body parses differently");
  }
  return 0;
}

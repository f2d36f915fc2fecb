// POST /v1/embeddings as OpenAI defines it: `input` a string, an array of strings, an array of
// token ids or an array of such arrays; `encoding_format` float or base64; `dimensions` only
// the model's own (its hidden states are not trained to be cut); `user` accepted without
// effect; anything else a 400 naming it. Each input runs as an engine request with a pooling
// (engine/request.h), all of them on one stream; the vectors come back L2-normalised, as
// OpenAI's do.
#pragma once

#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/request.h"
#include "server/api_error.h"
#include "server/reply_shaper.h"
#include "gguf/gguf_file.h"
#include "tokenizer/tokenizer.h"
#include "util/result.h"

namespace mnemo::server {

struct EmbeddingRequest {
  std::string model;  // "" : the server's first
  std::vector<std::vector<TokenId>> inputs;
  bool base64 = false;
};

// OpenAI's limits on one request.
inline constexpr size_t kMaxEmbeddingInputs = 2048;
inline constexpr int64_t kMaxEmbeddingTokens = 300000;

// Reads and bounds a request for a model of `context` tokens and `n_embd` dimensions: texts are
// tokenized as a prompt is (the model's BOS added), every input must be non-empty and shorter
// than the context.
std::variant<EmbeddingRequest, ApiError> read_embedding_request(const nlohmann::json& body, const Tokenizer& tokenizer,
                                                                int32_t context, int32_t n_embd);

// The reply to N inputs whose engine requests share one stream: each ends with a
// PooledEmbedding carrying its index (GenerationRequest::embedding_index) and a RequestDone.
class EmbeddingShaper final : public ReplyShaper {
 public:
  EmbeddingShaper(std::string model_id, size_t n_inputs, bool base64);
  bool stream(const StreamEvent& event, std::string& out) override;  // never streamed: as gather
  bool gather(const StreamEvent& event) override;
  Whole whole() override;

 private:
  std::string model_id_;
  bool base64_;
  std::vector<std::vector<float>> vectors_;
  size_t done_ = 0;
  int64_t prompt_tokens_ = 0;
  std::string error_;
};

// `values` scaled to unit Euclidean length (left as is when all zero).
std::vector<float> l2_normalized(std::vector<float> values);

// How a model's embeddings pool: `flag` ("mean" or "last") when given, else the GGUF's
// `<arch>.pooling_type` (1 mean, 3 last; others are not for a causal model and are refused), else
// the mean.
Result<Pooling> pooling_for(const gguf::File& file, const std::string& flag);

}  // namespace mnemo::server

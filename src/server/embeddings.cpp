#include "server/embeddings.h"

#include <openssl/evp.h>

#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "server/supported_fields.h"

namespace mnemo::server {

using nlohmann::json;

namespace {

// One input of token ids, each inside the vocabulary.
std::optional<ApiError> read_token_input(const json& ids, const Tokenizer& tokenizer, std::vector<TokenId>& out) {
  for (const json& id : ids.get_ref<const json::array_t&>()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= tokenizer.vocab_size()) {
      return bad_request(fmt::format("'input' token ids must be integers in 0..{}", tokenizer.vocab_size() - 1), "input");
    }
    out.push_back(static_cast<TokenId>(id.get<int64_t>()));
  }
  return std::nullopt;
}

// The inputs as token lists: a string, strings, token ids, or lists of token ids.
std::optional<ApiError> read_inputs(const json& input, const Tokenizer& tokenizer, std::vector<std::vector<TokenId>>& out) {
  // An empty text is an empty input (not the BOS its tokens would be).
  const auto text = [&](const json& s) {
    const std::string& t = s.get_ref<const std::string&>();
    out.push_back(t.empty() ? std::vector<TokenId>() : tokenizer.encode(t, true, false));
  };
  const char* expected = "'input' must be a string, an array of strings, an array of token ids or an array of arrays of token ids";
  if (input.is_string()) {
    text(input);
    return std::nullopt;
  }
  if (!input.is_array() || input.empty()) return bad_request(expected, "input");
  if (input.size() > kMaxEmbeddingInputs) {
    return bad_request(fmt::format("'input' holds {} inputs; at most {} are allowed", input.size(), kMaxEmbeddingInputs), "input");
  }
  const json::array_t& items = input.get_ref<const json::array_t&>();
  if (items.front().is_number_integer()) {
    out.emplace_back();
    return read_token_input(input, tokenizer, out.back());
  }
  for (const json& item : items) {
    if (item.is_string()) {
      text(item);
    } else if (item.is_array() && !item.empty()) {
      out.emplace_back();
      if (auto error = read_token_input(item, tokenizer, out.back())) return error;
    } else {
      return bad_request(expected, "input");
    }
  }
  return std::nullopt;
}

}  // namespace

std::variant<EmbeddingRequest, ApiError> read_embedding_request(const json& body, const Tokenizer& tokenizer, int32_t context,
                                                                int32_t n_embd) {
  if (auto refused = refuse_fields_outside(body, {"input", "model", "encoding_format", "dimensions", "user"})) return *refused;
  EmbeddingRequest request;
  if (const auto model = body.find("model"); model != body.end() && !model->is_null()) {
    if (!model->is_string()) return bad_request("'model' must be a string", "model");
    request.model = model->get<std::string>();
  }
  const auto input = body.find("input");
  if (input == body.end() || input->is_null()) return bad_request("'input' is required", "input");
  if (auto error = read_inputs(*input, tokenizer, request.inputs)) return *error;
  int64_t total = 0;
  for (size_t i = 0; i < request.inputs.size(); ++i) {
    const auto n = static_cast<int64_t>(request.inputs[i].size());
    if (n == 0) {
      return bad_request(fmt::format("input {} is empty", i), "input");
    }
    if (n >= context) {
      return bad_request(fmt::format("input {} has {} tokens; this model's maximum context length is {} tokens", i, n, context), "input");
    }
    total += n;
  }
  if (total > kMaxEmbeddingTokens) {
    return bad_request(fmt::format("the inputs have {} tokens in all; at most {} are allowed per request", total, kMaxEmbeddingTokens),
                       "input");
  }
  if (const auto format = body.find("encoding_format"); format != body.end() && !format->is_null()) {
    if (!format->is_string() || (*format != "float" && *format != "base64")) {
      return bad_request("'encoding_format' must be \"float\" or \"base64\"", "encoding_format");
    }
    request.base64 = *format == "base64";
  }
  if (const auto dimensions = body.find("dimensions"); dimensions != body.end() && !dimensions->is_null()) {
    if (!dimensions->is_number_integer() || dimensions->get<int64_t>() != n_embd) {
      return bad_request(fmt::format("this model's embeddings have {} dimensions, and its hidden states cannot be shortened: "
                                     "'dimensions' may only be {}",
                                     n_embd, n_embd),
                         "dimensions");
    }
  }
  if (const auto user = body.find("user"); user != body.end() && !user->is_null() && !user->is_string()) {
    return bad_request("'user' must be a string", "user");
  }
  return request;
}

std::vector<float> l2_normalized(std::vector<float> values) {
  double sum = 0.0;
  for (const float v : values) sum += static_cast<double>(v) * v;
  if (!(sum > 0.0) || !std::isfinite(sum)) return values;
  const double scale = 1.0 / std::sqrt(sum);
  for (float& v : values) v = static_cast<float>(v * scale);
  return values;
}

Result<Pooling> pooling_for(const gguf::File& file, const std::string& flag) {
  if (flag == "mean") return Pooling::kMean;
  if (flag == "last") return Pooling::kLast;
  if (!flag.empty()) return make_error("pooling '{}' is not one of mean, last", flag);
  MNEMO_ASSIGN_OR_RETURN(const std::string arch, file.get_string("general.architecture"));
  MNEMO_ASSIGN_OR_RETURN(const int64_t type, file.get_int_or(arch + ".pooling_type", 1));
  if (type == 1) return Pooling::kMean;
  if (type == 3) return Pooling::kLast;
  return make_error("{}.pooling_type {} (none, CLS or rank) is not a pooling of a causal model's hidden states; serve with "
                    "--pooling mean or last",
                    arch, type);
}

EmbeddingShaper::EmbeddingShaper(std::string model_id, size_t n_inputs, bool base64)
    : model_id_(std::move(model_id)), base64_(base64), vectors_(n_inputs) {}

bool EmbeddingShaper::stream(const StreamEvent& event, std::string&) { return gather(event); }

bool EmbeddingShaper::gather(const StreamEvent& event) {
  if (const auto* pooled = std::get_if<PooledEmbedding>(&event)) {
    if (pooled->index >= 0 && static_cast<size_t>(pooled->index) < vectors_.size()) {
      vectors_[static_cast<size_t>(pooled->index)] = l2_normalized(pooled->values);
    }
  } else if (const auto* done = std::get_if<RequestDone>(&event)) {
    ++done_;
    prompt_tokens_ += done->usage.prompt_tokens;
    if (!done->error.empty() && error_.empty()) error_ = done->error;
  }
  return done_ == vectors_.size();
}

ReplyShaper::Whole EmbeddingShaper::whole() {
  for (const std::vector<float>& v : vectors_) {
    if (v.empty() && error_.empty()) error_ = "an input ended without its embedding (cancelled)";
  }
  if (!error_.empty()) return {500, ApiError{500, error_, "server_error", "", ""}.to_json().dump()};
  json data = json::array();
  for (size_t i = 0; i < vectors_.size(); ++i) {
    json embedding;
    if (base64_) {
      // Little-endian float32s, as OpenAI's base64 embeddings are.
      std::string bytes(vectors_[i].size() * sizeof(float), '\0');
      std::memcpy(bytes.data(), vectors_[i].data(), bytes.size());
      std::string text(4 * ((bytes.size() + 2) / 3) + 1, '\0');
      const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(text.data()), reinterpret_cast<const unsigned char*>(bytes.data()),
                                    static_cast<int>(bytes.size()));
      text.resize(static_cast<size_t>(n));
      embedding = std::move(text);
    } else {
      embedding = vectors_[i];
    }
    data.push_back({{"object", "embedding"}, {"index", i}, {"embedding", std::move(embedding)}});
  }
  const json body = {{"object", "list"},
                     {"data", std::move(data)},
                     {"model", model_id_},
                     {"usage", {{"prompt_tokens", prompt_tokens_}, {"total_tokens", prompt_tokens_}}}};
  return {200, body.dump()};
}

}  // namespace mnemo::server

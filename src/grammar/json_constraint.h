// Constrained decoding to JSON (response_format json_object): which tokens may come next so that
// the output stays a prefix of a JSON object, and once the object is whole only the end of
// generation. One per sequence; the vocabulary's bytes are shared (TokenBytes).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "grammar/json_matcher.h"
#include "tokenizer/tokenizer.h"

namespace mnemo::grammar {

// Every token's bytes as it adds them to the text, and which tokens are plain string content
// (no quote, backslash or control byte): inside a string those pass without a try.
class TokenBytes {
 public:
  explicit TokenBytes(const Tokenizer& tokenizer);
  int32_t size() const { return static_cast<int32_t>(bytes_.size()); }
  const std::string& bytes(TokenId t) const { return bytes_[static_cast<size_t>(t)]; }
  bool plain(TokenId t) const { return plain_[static_cast<size_t>(t)] != 0; }
  bool ends_generation(TokenId t) const { return end_[static_cast<size_t>(t)] != 0; }

 private:
  std::vector<std::string> bytes_;
  std::vector<uint8_t> plain_;
  std::vector<uint8_t> end_;
};

class JsonConstraint {
 public:
  explicit JsonConstraint(std::shared_ptr<const TokenBytes> vocabulary) : vocabulary_(std::move(vocabulary)) {}

  // allowed[t] = 1 for each token that may come next (resized to the vocabulary).
  void allowed(std::vector<uint8_t>& allowed) const;
  // The token sampled: false if it was not allowed (the state is then unchanged).
  bool accept(TokenId token);
  bool complete() const { return matcher_.complete(); }

 private:
  std::shared_ptr<const TokenBytes> vocabulary_;
  JsonMatcher matcher_{/*object_root=*/true};
};

}  // namespace mnemo::grammar

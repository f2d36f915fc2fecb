// SentencePiece-style tokenizer (tokenizer.ggml.model "llama": Gemma, Llama 2, Mistral), as
// llama.cpp implements it: spaces become U+2581 "▁", the first piece of text (and any piece after a
// special token) gets a "▁" prefix when add_space_prefix, characters are merged pairwise by the
// score of the token they form, and what matches no token falls back to byte tokens <0xXX>.
#pragma once

#include <array>
#include <memory>

#include "tokenizer/vocab_tokenizer.h"

namespace mnemo::tokenizer {

class SpmTokenizer final : public VocabTokenizer {
 public:
  static Result<std::unique_ptr<Tokenizer>> create(const gguf::File& file);

 private:
  explicit SpmTokenizer(Vocab loaded);

  void encode_text(std::string_view text, bool after_special, std::vector<TokenId>& out) const override;
  void append_normal_piece(TokenId token, std::string& out) const override;

  std::array<TokenId, 256> byte_tokens_{};  // -1 where the vocabulary has no token for the byte
  // Bytes that some token has right before a "▁". Before any other byte a "▁" starts a new
  // segment that no merge can cross, so segments merge separately: same result, but small merge
  // queues instead of one the size of the text (which is cache-bound and several times slower).
  std::array<bool, 256> joins_following_space_{};
};

}  // namespace mnemo::tokenizer

// Byte-level BPE tokenizer (tokenizer.ggml.model "gpt2": GPT-2, Llama 3, Qwen 2), as llama.cpp
// implements it: the pre-tokenizer named by tokenizer.ggml.pre splits the text into words, each
// word's UTF-8 bytes are written in GPT-2's byte alphabet, and the merge rules are applied within
// each word by rank.
#pragma once

#include <memory>

#include "tokenizer/bpe_merges.h"
#include "tokenizer/pair_merge.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/vocab_tokenizer.h"

namespace mnemo::tokenizer {

class BpeTokenizer final : public VocabTokenizer {
 public:
  static Result<std::unique_ptr<Tokenizer>> create(const gguf::File& file);

 private:
  BpeTokenizer(Vocab vocab, BpeMerges merges, PreTokenizer pre_tokenizer, bool ignore_merges);

  void encode_text(std::string_view text, bool after_special, std::vector<TokenId>& out) const override;
  void append_normal_piece(TokenId token, std::string& out) const override;
  // `merger` and `symbols` are scratch space, reused across the words of one text.
  void encode_word(std::string_view word, PairMerger<int32_t>& merger, std::vector<std::string_view>& symbols,
                   std::vector<TokenId>& out) const;

  BpeMerges merges_;
  PreTokenizer pre_tokenizer_;
  bool ignore_merges_;  // a word that is a token as a whole is not merged (Llama 3)
};

}  // namespace mnemo::tokenizer

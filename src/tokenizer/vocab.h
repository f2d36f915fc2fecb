// The vocabulary of a GGUF tokenizer (tokenizer.ggml.*): token texts, scores, types, the special
// token ids and flags, validated on load. Also derives what llama.cpp derives from token texts
// (EOT/EOG detection, control-type overrides), because encode/decode must match llama.cpp.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/gguf_file.h"
#include "tokenizer/text_index.h"
#include "tokenizer/tokenizer.h"
#include "util/result.h"

namespace mnemo::tokenizer {

// Token attributes: the GGUF type as a bit, plus what is derived from texts and model names
// (an EOT-looking token becomes control; phi-3's special tokens swallow whitespace).
enum TokenAttr : uint16_t {
  kAttrUndefined = 0,
  kAttrUnknown = 1 << 0,
  kAttrUnused = 1 << 1,
  kAttrNormal = 1 << 2,
  kAttrControl = 1 << 3,
  kAttrUserDefined = 1 << 4,
  kAttrByte = 1 << 5,
  kAttrLstrip = 1 << 6,  // swallows whitespace before it when split out of text
  kAttrRstrip = 1 << 7,  // swallows whitespace after it
};

// What llama.cpp assumes for a tokenizer family before the metadata overrides it.
struct VocabDefaults {
  TokenId bos = -1;
  TokenId eos = -1;
  TokenId unk = -1;
  bool add_bos = false;
  bool add_eos = false;
  bool add_space_prefix = false;
  bool clean_spaces = false;
};

class Vocab {
 public:
  static Result<Vocab> load(const gguf::File& file, const VocabDefaults& defaults);

  Vocab(Vocab&&) noexcept = default;
  Vocab& operator=(Vocab&&) noexcept = default;
  Vocab(const Vocab&) = delete;  // the index points into this object's storage
  Vocab& operator=(const Vocab&) = delete;

  int32_t size() const { return static_cast<int32_t>(texts_.size()); }
  bool contains(TokenId id) const { return id >= 0 && id < size(); }
  std::string_view text(TokenId id) const { return texts_[static_cast<size_t>(id)]; }
  float score(TokenId id) const { return scores_[static_cast<size_t>(id)]; }
  TokenType type(TokenId id) const { return types_[static_cast<size_t>(id)]; }
  uint16_t attributes(TokenId id) const { return attributes_[static_cast<size_t>(id)]; }
  bool has_any(TokenId id, uint16_t mask) const { return (attributes(id) & mask) != 0; }
  // The token whose text is exactly `text`, of any type; -1 if none.
  TokenId find(std::string_view text) const { return index_.find(text); }

  TokenId bos() const { return bos_; }
  TokenId eos() const { return eos_; }
  TokenId unk() const { return unk_; }
  bool add_bos() const { return add_bos_; }
  bool add_eos() const { return add_eos_; }
  bool add_space_prefix() const { return add_space_prefix_; }
  bool clean_spaces() const { return clean_spaces_; }
  bool is_end_of_generation(TokenId id) const { return contains(id) && end_of_generation_[static_cast<size_t>(id)]; }

 private:
  Vocab() = default;

  Status load_tokens(const gguf::File& file);
  Status load_scores_and_types(const gguf::File& file);
  Status load_special_ids(const gguf::File& file, const VocabDefaults& defaults);
  void derive_from_texts(const gguf::File& file);
  TokenId find_first_of(std::span<const std::string_view> texts) const;

  std::vector<char> text_storage_;
  std::vector<std::string_view> texts_;  // into text_storage_
  std::vector<float> scores_;
  std::vector<TokenType> types_;
  std::vector<uint16_t> attributes_;
  TextIndex index_;  // over texts_
  std::vector<bool> end_of_generation_;

  TokenId bos_ = -1;
  TokenId eos_ = -1;
  TokenId unk_ = -1;
  TokenId eot_ = -1;
  TokenId eom_ = -1;
  TokenId fim_pre_ = -1;
  TokenId fim_suf_ = -1;
  TokenId fim_mid_ = -1;
  TokenId fim_pad_ = -1;
  TokenId fim_rep_ = -1;
  TokenId fim_sep_ = -1;
  bool add_bos_ = false;
  bool add_eos_ = false;
  bool add_space_prefix_ = false;
  bool clean_spaces_ = false;
};

}  // namespace mnemo::tokenizer

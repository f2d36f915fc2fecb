// BPE merge rules (tokenizer.ggml.merges): "left right" strings in priority order; the rank of a
// rule is its index. Validated against the vocabulary on load.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "gguf/gguf_file.h"
#include "tokenizer/text_index.h"
#include "tokenizer/vocab.h"
#include "util/result.h"

namespace mnemo::tokenizer {

class BpeMerges {
 public:
  static Result<BpeMerges> load(const gguf::File& file, const Vocab& vocab);

  BpeMerges(BpeMerges&&) noexcept = default;
  BpeMerges& operator=(BpeMerges&&) noexcept = default;
  BpeMerges(const BpeMerges&) = delete;  // the index points into this object's storage
  BpeMerges& operator=(const BpeMerges&) = delete;

  // Rank of the rule merging `left` and `right`, if there is one.
  std::optional<int32_t> rank(std::string_view left, std::string_view right) const;
  size_t size() const { return rules_.size(); }

 private:
  BpeMerges() = default;

  std::vector<char> storage_;
  std::vector<std::string_view> rules_;  // into storage_
  std::vector<uint32_t> left_lengths_;   // where each rule splits: at its first space after byte 0
  TextIndex index_;                      // over rules_
};

}  // namespace mnemo::tokenizer

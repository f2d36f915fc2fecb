// Helpers for the tokenizer tests: tokenizers from in-memory GGUFs and from the real files.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "tokenizer/tokenizer.h"
#include "util/result.h"

namespace mnemo::tokenizer_test {

// Builds the tokenizer of a GGUF made by `writer` (the bytes only need to live while it loads).
Result<std::unique_ptr<Tokenizer>> tokenizer_from(const gguf::Writer& writer);

// A small SentencePiece vocabulary: <unk> <s> </s>, the 256 byte tokens, then `pieces` (normal,
// with the given scores), then `controls` and `user_defined` texts.
struct SpmVocabSpec {
  std::vector<std::pair<std::string, float>> pieces;
  std::vector<std::string> controls;
  std::vector<std::string> user_defined;
};
gguf::Writer spm_writer(const SpmVocabSpec& spec);
constexpr int32_t kFirstSpmPiece = 3 + 256;

// A small byte-level BPE vocabulary: the 256 byte characters, then the results of `merges`
// ("left right", in rank order), then `controls`.
gguf::Writer bpe_writer(const std::vector<std::string>& merges, const std::vector<std::string>& controls,
                        const std::string& pre = "gpt-2");

// Whether `text` is well-formed UTF-8.
bool is_valid_utf8(std::string_view text);

std::string read_file_or_fail(const std::string& path);

}  // namespace mnemo::tokenizer_test

// Splits text into the words that byte-level BPE merges within, by the rules llama.cpp applies
// for each tokenizer.ggml.pre. A pre-tokenizer is a sequence of steps; each step splits every
// word produced so far into matches and the text between them.
//
// The three common rule sets (GPT-2, Llama 3, Qwen 2) are hand-written scanners over Unicode
// character properties from ICU, reproducing llama.cpp's scanners, which stand in for the
// original regexes (llama.cpp's comments quote them); other steps are ICU regexes, written to
// match what llama.cpp's std::regex makes of its patterns (pre_tokenizer.cpp says how).
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "util/result.h"

namespace mnemo::tokenizer {

enum class PreTokenizerKind {
  kDefault,    // llama.cpp's fallback: punctuation runs, GPT-2 words, digit runs, digit triples
  kGpt2,       // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  kLlama3,     // (?i:'s|'t|...)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
  kQwen2,      // Llama 3's rules with single digits
  kStarCoder,  // single digits, then GPT-2's rules
  // Mistral's tekken: words split at case changes (an uppercase run, then a lowercase one),
  // single digits, punctuation runs taking a trailing newline or '/'.
  kTekken,
  kGpt4o,  // GPT-4o's o200k (Phi-4): tekken's words with English contractions, digit triples
};

class PreTokenizer {
 public:
  static Result<PreTokenizer> create(PreTokenizerKind kind);

  PreTokenizer(PreTokenizer&&) noexcept;
  PreTokenizer& operator=(PreTokenizer&&) noexcept;
  ~PreTokenizer();

  // Lengths, in codepoints, of the consecutive words that make up `codepoints`.
  std::vector<size_t> split(std::span<const char32_t> codepoints) const;

 private:
  enum class Scanner { kGpt2, kLlama3, kQwen2 };
  struct CompiledRegex;  // ICU, kept out of this header
  struct Step {
    Scanner scanner = Scanner::kGpt2;
    std::unique_ptr<CompiledRegex> regex;  // the step is this regex when set
  };

  PreTokenizer() = default;
  Status add_regex_step(const std::string& pattern);

  std::vector<Step> steps_;
};

}  // namespace mnemo::tokenizer

// Tokenizers built from a GGUF's metadata (tokenizer.ggml.*): SentencePiece-style ("llama":
// Gemma, Llama 2, Mistral: scores, byte fallback) and byte-level BPE ("gpt2": Llama 3, Qwen 2:
// merges and the pre-tokenizer split rules of tokenizer.ggml.pre). Output matches llama.cpp's
// tokenizer on the same file token for token.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/gguf_file.h"
#include "util/result.h"

namespace mnemo {

using TokenId = int32_t;

// GGUF token types (tokenizer.ggml.token_type).
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

class Tokenizer {
 public:
  static Result<std::unique_ptr<Tokenizer>> from_gguf(const gguf::File& file);
  virtual ~Tokenizer() = default;

  // add_special: add BOS/EOS as the metadata says (tokenizer.ggml.add_bos_token, ...).
  // parse_special: text like "<start_of_turn>" becomes the control/user-defined token instead of
  // being tokenised as plain text.
  virtual std::vector<TokenId> encode(std::string_view text, bool add_special, bool parse_special) const = 0;

  // The bytes of one token as text; control tokens give "" unless `special`. Pieces need not be
  // valid UTF-8 on their own (byte tokens); ids outside the vocabulary give "".
  virtual std::string token_to_piece(TokenId token, bool special) const = 0;
  // llama_detokenize(remove_special=false, unparse_special=special): the pieces, joined, then
  // detokenize_rules() applied. Text generated for a user should rather be streamed through
  // StreamingDetokenizer (plain pieces, like llama-server), which differs from decode() exactly
  // where those rules apply (never for Gemma).
  std::string decode(std::span<const TokenId> tokens, bool special = false) const;

  virtual int32_t vocab_size() const = 0;
  virtual TokenId bos() const = 0;  // -1 if none
  virtual TokenId eos() const = 0;  // -1 if none
  // End of generation: EOS, EOT/end_of_turn and any other token the metadata marks as such.
  virtual bool is_end_of_generation(TokenId token) const = 0;
  virtual std::string_view model_name() const = 0;  // "llama" (SPM) or "gpt2" (BPE)
  virtual TokenType token_type(TokenId token) const = 0;
  virtual std::string_view token_text(TokenId token) const = 0;  // the raw vocab string

  // How decode() post-processes the concatenated pieces, as llama.cpp's llama_detokenize does:
  // SentencePiece vocabularies that add a space prefix drop one leading space of the first piece;
  // some BPE vocabularies (GPT-2, Llama 3) remove the space before ?!., and in " 's", " 're" ...
  struct DetokenizeRules {
    bool strip_leading_space = false;
    bool clean_up_spaces = false;
  };
  virtual DetokenizeRules detokenize_rules() const { return {}; }
};

// Turns a stream of tokens into text without ever emitting half of a UTF-8 character: bytes of
// an incomplete character are held back until the rest arrives (or flush()). Everything it emits
// is valid UTF-8: bytes that can never become a character are replaced by U+FFFD at once.
class StreamingDetokenizer {
 public:
  explicit StreamingDetokenizer(const Tokenizer& tokenizer, bool special = false)
      : tokenizer_(tokenizer), special_(special) {}
  std::string push(TokenId token);
  std::string flush();  // whatever is held back, invalid bytes replaced by U+FFFD

 private:
  const Tokenizer& tokenizer_;
  bool special_;
  std::string pending_;
};

}  // namespace mnemo

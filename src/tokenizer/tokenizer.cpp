#include "tokenizer/tokenizer.h"

#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/spm_tokenizer.h"

namespace mnemo {

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_gguf(const gguf::File& file) {
  constexpr std::string_view kModelKey = "tokenizer.ggml.model";
  if (!file.has(kModelKey)) return make_error("{}: tokenizer: metadata '{}' is missing", file.name(), kModelKey);
  MNEMO_ASSIGN_OR_RETURN(const std::string model, file.get_string(kModelKey));
  if (model == "llama") return tokenizer::SpmTokenizer::create(file);
  if (model == "gpt2") return tokenizer::BpeTokenizer::create(file);
  return make_error(
      "{}: tokenizer model '{}' is not supported (supported: 'llama' (SentencePiece), 'gpt2' (byte-level BPE))",
      file.name(), model);
}

}  // namespace mnemo

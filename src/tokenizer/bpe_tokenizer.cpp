#include "tokenizer/bpe_tokenizer.h"

#include <array>
#include <optional>

#include "tokenizer/byte_level.h"
#include "tokenizer/utf8.h"

namespace mnemo::tokenizer {
namespace {

// What llama.cpp ties to each tokenizer.ggml.pre value besides the split rules.
struct PreTokenizerSpec {
  std::string_view name;
  PreTokenizerKind kind;
  bool clean_spaces;
  bool ignore_merges = false;
  bool add_bos = false;
};

constexpr std::array kPreTokenizers = {
    // An empty name is what old converters wrote; llama.cpp then falls back to "default".
    PreTokenizerSpec{"", PreTokenizerKind::kDefault, true},
    PreTokenizerSpec{"default", PreTokenizerKind::kDefault, true},
    PreTokenizerSpec{"llama3", PreTokenizerKind::kLlama3, true, true, true},
    PreTokenizerSpec{"llama-v3", PreTokenizerKind::kLlama3, true, true, true},
    PreTokenizerSpec{"llama-bpe", PreTokenizerKind::kLlama3, true, true, true},
    PreTokenizerSpec{"falcon3", PreTokenizerKind::kLlama3, true, true, true},
    PreTokenizerSpec{"falcon-h1", PreTokenizerKind::kLlama3, true, true, true},
    PreTokenizerSpec{"pixtral", PreTokenizerKind::kLlama3, true, true, true},
    PreTokenizerSpec{"midm-2.0", PreTokenizerKind::kLlama3, true, true, true},
    PreTokenizerSpec{"lfm2", PreTokenizerKind::kLlama3, true, true, true},
    PreTokenizerSpec{"jina-v5-nano", PreTokenizerKind::kLlama3, true, true, true},
    PreTokenizerSpec{"dbrx", PreTokenizerKind::kLlama3, true},
    PreTokenizerSpec{"smaug-bpe", PreTokenizerKind::kLlama3, true},
    PreTokenizerSpec{"gpt-2", PreTokenizerKind::kGpt2, true},
    PreTokenizerSpec{"phi-2", PreTokenizerKind::kGpt2, true},
    PreTokenizerSpec{"gigachat", PreTokenizerKind::kGpt2, true},
    PreTokenizerSpec{"a.x-4.0", PreTokenizerKind::kGpt2, true},
    PreTokenizerSpec{"mellum", PreTokenizerKind::kGpt2, true},
    PreTokenizerSpec{"mpt", PreTokenizerKind::kGpt2, true},
    PreTokenizerSpec{"olmo", PreTokenizerKind::kGpt2, true},
    PreTokenizerSpec{"jais", PreTokenizerKind::kGpt2, true},
    PreTokenizerSpec{"exaone4", PreTokenizerKind::kGpt2, true},
    PreTokenizerSpec{"trillion", PreTokenizerKind::kGpt2, false},
    PreTokenizerSpec{"granite-docling", PreTokenizerKind::kGpt2, false},
    PreTokenizerSpec{"qwen2", PreTokenizerKind::kQwen2, false},
    PreTokenizerSpec{"deepseek-r1-qwen", PreTokenizerKind::kQwen2, false},
    PreTokenizerSpec{"kormo", PreTokenizerKind::kQwen2, false},
    PreTokenizerSpec{"f2llmv2", PreTokenizerKind::kQwen2, false},
    PreTokenizerSpec{"hunyuan", PreTokenizerKind::kQwen2, false},
    PreTokenizerSpec{"solar-open", PreTokenizerKind::kQwen2, false},
    PreTokenizerSpec{"stablelm2", PreTokenizerKind::kQwen2, true},
    PreTokenizerSpec{"megrez", PreTokenizerKind::kQwen2, true},
    PreTokenizerSpec{"starcoder", PreTokenizerKind::kStarCoder, true},
    PreTokenizerSpec{"refact", PreTokenizerKind::kStarCoder, true},
    PreTokenizerSpec{"codeshell", PreTokenizerKind::kStarCoder, true},
    PreTokenizerSpec{"exaone", PreTokenizerKind::kStarCoder, true},
    PreTokenizerSpec{"minerva-7b", PreTokenizerKind::kStarCoder, true},
    PreTokenizerSpec{"mellum2", PreTokenizerKind::kStarCoder, true},
    PreTokenizerSpec{"command-r", PreTokenizerKind::kStarCoder, false},
    PreTokenizerSpec{"smollm", PreTokenizerKind::kStarCoder, false},
    PreTokenizerSpec{"tekken", PreTokenizerKind::kTekken, false, true, true},
    PreTokenizerSpec{"gpt-4o", PreTokenizerKind::kGpt4o, false},
    PreTokenizerSpec{"minimax-m2", PreTokenizerKind::kGpt4o, false},
};

const PreTokenizerSpec* find_pre_tokenizer(std::string_view name) {
  for (const PreTokenizerSpec& spec : kPreTokenizers) {
    if (spec.name == name) return &spec;
  }
  return nullptr;
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> BpeTokenizer::create(const gguf::File& file) {
  MNEMO_ASSIGN_OR_RETURN(const std::string pre_name, file.get_string_or("tokenizer.ggml.pre", ""));
  const PreTokenizerSpec* spec = find_pre_tokenizer(pre_name);
  if (spec == nullptr) {
    return make_error("{}: tokenizer: pre-tokenizer '{}' (tokenizer.ggml.pre) is not supported", file.name(), pre_name);
  }
  // No default BOS/EOS: llama.cpp's (token 11) would make an ordinary token end generation.
  const VocabDefaults defaults{.add_bos = spec->add_bos, .clean_spaces = spec->clean_spaces};
  MNEMO_ASSIGN_OR_RETURN(Vocab vocab, Vocab::load(file, defaults));
  MNEMO_ASSIGN_OR_RETURN(BpeMerges merges, BpeMerges::load(file, vocab));
  Result<PreTokenizer> pre_tokenizer = PreTokenizer::create(spec->kind);
  if (!pre_tokenizer.ok()) return pre_tokenizer.error().with_context(file.name());
  return std::unique_ptr<Tokenizer>(
      new BpeTokenizer(std::move(vocab), std::move(merges), std::move(pre_tokenizer).value(), spec->ignore_merges));
}

BpeTokenizer::BpeTokenizer(Vocab vocab, BpeMerges merges, PreTokenizer pre_tokenizer, bool ignore_merges)
    : VocabTokenizer("gpt2", std::move(vocab)),
      merges_(std::move(merges)),
      pre_tokenizer_(std::move(pre_tokenizer)),
      ignore_merges_(ignore_merges) {}

void BpeTokenizer::encode_text(std::string_view text, bool /*after_special*/, std::vector<TokenId>& out) const {
  // llama.cpp decodes leniently (bad bytes become U+FFFD) before splitting, so the words are
  // re-encoded from codepoints rather than sliced from `text`.
  const std::vector<char32_t> codepoints = decode_codepoints_lenient(text);
  std::string utf8;
  std::string word;
  PairMerger<int32_t> merger;
  std::vector<std::string_view> symbols;
  size_t word_begin = 0;
  for (const size_t length : pre_tokenizer_.split(codepoints)) {
    utf8.clear();
    for (size_t i = word_begin; i < word_begin + length; ++i) append_utf8(utf8, codepoints[i]);
    word.clear();
    for (const char byte : utf8) word += byte_level_char(static_cast<uint8_t>(byte));
    encode_word(word, merger, symbols, out);
    word_begin += length;
  }
}

void BpeTokenizer::encode_word(std::string_view word, PairMerger<int32_t>& merger,
                               std::vector<std::string_view>& symbols, std::vector<TokenId>& out) const {
  const Vocab& vocab = this->vocab();
  if (ignore_merges_) {
    if (const TokenId token = vocab.find(word); token >= 0) {
      out.push_back(token);
      return;
    }
  }
  symbols.clear();
  merger.merge(
      word,
      [&](std::string_view left, std::string_view right) -> std::optional<int32_t> {
        const std::optional<int32_t> rank = merges_.rank(left, right);
        if (!rank) return std::nullopt;
        return -*rank;  // lower rank merges first
      },
      symbols);
  for (const std::string_view symbol : symbols) {
    if (const TokenId token = vocab.find(symbol); token >= 0) {
      out.push_back(token);
      continue;
    }
    // As llama.cpp: a symbol without a token is spelled by its single bytes that are tokens.
    for (const char byte : symbol) {
      if (const TokenId token = vocab.find(std::string_view(&byte, 1)); token >= 0) out.push_back(token);
    }
  }
}

void BpeTokenizer::append_normal_piece(TokenId token, std::string& out) const {
  const std::string_view text = vocab().text(token);
  for (const char32_t codepoint : decode_codepoints_lenient(text)) {
    if (const int byte = byte_level_byte(codepoint); byte >= 0) {
      out.push_back(static_cast<char>(byte));
      continue;
    }
    // llama.cpp's marker for a character outside the byte alphabet (it repeats the whole token).
    std::string utf8;
    append_utf8(utf8, codepoint);
    out += "[UNK_BYTE_0x";
    for (const char byte : utf8) out += fmt::format("{:02x}", static_cast<uint8_t>(byte));
    out += text;
    out += "]";
  }
}

}  // namespace mnemo::tokenizer

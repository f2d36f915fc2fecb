#include "tokenizer/spm_tokenizer.h"

#include <algorithm>
#include <optional>

#include "tokenizer/pair_merge.h"

namespace mnemo::tokenizer {
namespace {

constexpr std::string_view kSpaceMarker = "\xE2\x96\x81";  // U+2581, SentencePiece's visible space

}  // namespace

Result<std::unique_ptr<Tokenizer>> SpmTokenizer::create(const gguf::File& file) {
  // llama.cpp's defaults for SentencePiece vocabularies (Llama 2's ids), before the metadata.
  const VocabDefaults defaults{
      .bos = 1, .eos = 2, .unk = 0, .add_bos = true, .add_eos = false, .add_space_prefix = true, .clean_spaces = false};
  MNEMO_ASSIGN_OR_RETURN(Vocab vocab, Vocab::load(file, defaults));
  return std::unique_ptr<Tokenizer>(new SpmTokenizer(std::move(vocab)));
}

SpmTokenizer::SpmTokenizer(Vocab loaded) : VocabTokenizer("llama", std::move(loaded)) {
  const Vocab& vocab = this->vocab();
  static constexpr char kHex[] = "0123456789ABCDEF";
  for (int byte = 0; byte < 256; ++byte) {
    const char name[] = {'<', '0', 'x', kHex[byte >> 4], kHex[byte & 15], '>'};
    TokenId token = vocab.find(std::string_view(name, sizeof(name)));
    // Vocabularies without byte tokens may still have the byte as a one-character token.
    if (token < 0) {
      const char raw = static_cast<char>(byte);
      token = vocab.find(std::string_view(&raw, 1));
    }
    byte_tokens_[static_cast<size_t>(byte)] = token;
  }
  for (TokenId id = 0; id < vocab.size(); ++id) {
    const std::string_view text = vocab.text(id);
    for (size_t at = text.find(kSpaceMarker, 1); at != std::string_view::npos; at = text.find(kSpaceMarker, at + 1)) {
      joins_following_space_[static_cast<uint8_t>(text[at - 1])] = true;
    }
  }
}

void SpmTokenizer::encode_text(std::string_view text, bool after_special, std::vector<TokenId>& out) const {
  const Vocab& vocab = this->vocab();
  std::string escaped;
  escaped.reserve(text.size() + text.size() / 2 + kSpaceMarker.size());
  if (vocab.add_space_prefix() && after_special) escaped += kSpaceMarker;
  for (const char c : text) {
    if (c == ' ') {
      escaped += kSpaceMarker;
    } else {
      escaped.push_back(c);
    }
  }

  auto pair_score = [&](std::string_view left, std::string_view right) -> std::optional<float> {
    // Adjacent symbols are contiguous in the text, so the pair's text is one view.
    const TokenId token = vocab.find(std::string_view(left.data(), left.size() + right.size()));
    if (token < 0) return std::nullopt;
    return vocab.score(token);
  };
  PairMerger<float> merger;
  std::vector<std::string_view> symbols;
  const std::string_view all = escaped;
  size_t segment_begin = 0;
  // Segments start at character boundaries as the merger itself splits the whole text.
  for (size_t i = 0; i < all.size(); i += std::min(utf8_sequence_length(all[i]), all.size() - i)) {
    if (i > segment_begin && all.substr(i, kSpaceMarker.size()) == kSpaceMarker &&
        !joins_following_space_[static_cast<uint8_t>(all[i - 1])]) {
      merger.merge(all.substr(segment_begin, i - segment_begin), pair_score, symbols);
      segment_begin = i;
    }
  }
  merger.merge(all.substr(segment_begin), pair_score, symbols);

  for (const std::string_view symbol : symbols) {
    if (const TokenId token = vocab.find(symbol); token >= 0) {
      out.push_back(token);
      continue;
    }
    for (const char byte : symbol) {
      const TokenId byte_token = byte_tokens_[static_cast<uint8_t>(byte)];
      // llama.cpp aborts when a vocabulary can spell neither the byte nor the text; the unknown
      // token (if any) is the honest answer.
      if (byte_token >= 0) {
        out.push_back(byte_token);
      } else if (vocab.unk() >= 0) {
        out.push_back(vocab.unk());
      }
    }
  }
}

void SpmTokenizer::append_normal_piece(TokenId token, std::string& out) const {
  const std::string_view text = vocab().text(token);
  for (size_t i = 0; i < text.size();) {
    if (text.substr(i, kSpaceMarker.size()) == kSpaceMarker) {
      out.push_back(' ');
      i += kSpaceMarker.size();
    } else {
      out.push_back(text[i]);
      ++i;
    }
  }
}

}  // namespace mnemo::tokenizer

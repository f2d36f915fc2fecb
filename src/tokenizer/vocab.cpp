#include "tokenizer/vocab.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <span>
#include <variant>

namespace mnemo::tokenizer {
namespace {

constexpr std::string_view kTokensKey = "tokenizer.ggml.tokens";
constexpr std::string_view kScoresKey = "tokenizer.ggml.scores";
constexpr std::string_view kTokenTypesKey = "tokenizer.ggml.token_type";

// llama.cpp finds these roles by text when the metadata does not name them (the converters do
// not always write the ids); a token found this way is treated as a control token.
constexpr std::string_view kEndOfTurnTexts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>",
    "<EOT>", "_<EOT>", "[EOT]", "<\xEF\xBD\x9C" "end\xE2\x96\x81" "of\xE2\x96\x81" "sentence\xEF\xBD\x9C>",
    "<end_of_utterance>"};
constexpr std::string_view kEndOfMessageTexts[] = {"<|eom_id|>"};
constexpr std::string_view kFimPrefixTexts[] = {
    "<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "begin\xEF\xBD\x9C>",
    "<PRE>", "\xE2\x96\x81<PRE>", "<|code_prefix|>", "<|prefix|>"};
constexpr std::string_view kFimSuffixTexts[] = {
    "<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "hole\xEF\xBD\x9C>",
    "<SUF>", "\xE2\x96\x81<SUF>", "<|code_suffix|>", "<|suffix|>"};
constexpr std::string_view kFimMiddleTexts[] = {
    "<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "end\xEF\xBD\x9C>",
    "<MID>", "\xE2\x96\x81<MID>", "<|code_middle|>", "<|middle|>"};
constexpr std::string_view kFimPadTexts[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>",
                                                                  "[PAD]"};
constexpr std::string_view kFimRepoTexts[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>",
                                                                   "<REPO>", "<reponame>"};
constexpr std::string_view kFimSeparatorTexts[] = {"<|file_sep|>"};

// Every token with one of these texts ends generation (llama.cpp's list, by template family).
constexpr std::string_view kEndOfGenerationTexts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<\xEF\xBD\x9C" "end\xE2\x96\x81" "of\xE2\x96\x81" "sentence\xEF\xBD\x9C>", "[e~["};

// gpt-oss's channel markers must always be rendered.
constexpr std::string_view kAlwaysRenderedTexts[] = {"<|channel|>", "<|message|>", "<|start|>",
                                                                          "<|constrain|>"};

uint16_t attributes_of(TokenType type) {
  switch (type) {
    case TokenType::kNormal: return kAttrNormal;
    case TokenType::kUnknown: return kAttrUnknown;
    case TokenType::kControl: return kAttrControl;
    case TokenType::kUserDefined: return kAttrUserDefined;
    case TokenType::kUnused: return kAttrUnused;
    case TokenType::kByte: return kAttrByte;
    case TokenType::kUndefined: return kAttrUndefined;
  }
  return kAttrUndefined;
}

TokenType token_type_from(int64_t raw) {
  if (raw < static_cast<int64_t>(TokenType::kUndefined) || raw > static_cast<int64_t>(TokenType::kByte)) {
    return TokenType::kUndefined;
  }
  return static_cast<TokenType>(raw);
}

std::string lowercase_ascii(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

}  // namespace

Result<Vocab> Vocab::load(const gguf::File& file, const VocabDefaults& defaults) {
  Vocab vocab;
  MNEMO_RETURN_IF_ERROR(vocab.load_tokens(file));
  MNEMO_RETURN_IF_ERROR(vocab.load_scores_and_types(file));
  MNEMO_RETURN_IF_ERROR(vocab.load_special_ids(file, defaults));
  vocab.derive_from_texts(file);
  return vocab;
}

Status Vocab::load_tokens(const gguf::File& file) {
  const gguf::Value* value = file.find(kTokensKey);
  if (value == nullptr) return make_error("{}: tokenizer: metadata '{}' is missing", file.name(), kTokensKey);
  const auto* array = std::get_if<gguf::Array>(&value->v);
  if (array == nullptr || array->elem_type != gguf::ValueType::kString) {
    return make_error("{}: tokenizer: metadata '{}' must be an array of strings", file.name(), kTokensKey);
  }
  if (array->items.empty()) return make_error("{}: tokenizer: metadata '{}' is empty", file.name(), kTokensKey);
  if (array->items.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    return make_error("{}: tokenizer: {} tokens is more than token ids can address", file.name(),
                      array->items.size());
  }

  // llama.cpp renames empty tokens so that every token has a distinct, findable text.
  auto text_of = [](const gguf::Value& item, size_t index, std::string& placeholder) -> std::string_view {
    const auto* text = std::get_if<std::string>(&item.v);
    if (text != nullptr && !text->empty()) return *text;
    placeholder = fmt::format("[EMPTY_{}]", index);
    return placeholder;
  };
  std::string placeholder;
  size_t total_bytes = 0;
  for (size_t i = 0; i < array->items.size(); ++i) total_bytes += text_of(array->items[i], i, placeholder).size();
  text_storage_.resize(total_bytes);
  texts_.reserve(array->items.size());
  size_t offset = 0;
  for (size_t i = 0; i < array->items.size(); ++i) {
    const std::string_view text = text_of(array->items[i], i, placeholder);
    std::copy(text.begin(), text.end(), text_storage_.begin() + static_cast<std::ptrdiff_t>(offset));
    texts_.emplace_back(text_storage_.data() + offset, text.size());
    offset += text.size();
  }

  index_.build(texts_);
  if (!index_.duplicates().empty()) {
    const TextIndex::Duplicate duplicate = index_.duplicates().front();
    return make_error("{}: tokenizer: tokens {} and {} have the same text '{}'", file.name(), duplicate.first,
                      duplicate.again, texts_[static_cast<size_t>(duplicate.first)]);
  }
  return ok_status();
}

Status Vocab::load_scores_and_types(const gguf::File& file) {
  const size_t count = texts_.size();
  scores_.assign(count, 0.0F);
  if (const gguf::Value* value = file.find(kScoresKey); value != nullptr) {
    const auto* array = std::get_if<gguf::Array>(&value->v);
    if (array == nullptr) return make_error("{}: tokenizer: metadata '{}' must be an array of numbers", file.name(), kScoresKey);
    if (array->items.size() != count) {
      return make_error("{}: tokenizer: metadata '{}' has {} entries for {} tokens", file.name(), kScoresKey,
                        array->items.size(), count);
    }
    for (size_t i = 0; i < count; ++i) {
      double score = 0;
      if (!array->items[i].as_double(&score)) {
        return make_error("{}: tokenizer: metadata '{}' must be an array of numbers", file.name(), kScoresKey);
      }
      // A NaN would break the strict ordering the merge queue relies on.
      if (std::isnan(score)) return make_error("{}: tokenizer: score of token {} is NaN", file.name(), i);
      scores_[i] = static_cast<float>(score);
    }
  }

  types_.assign(count, TokenType::kNormal);
  if (const gguf::Value* value = file.find(kTokenTypesKey); value != nullptr) {
    const auto* array = std::get_if<gguf::Array>(&value->v);
    if (array == nullptr) {
      return make_error("{}: tokenizer: metadata '{}' must be an array of integers", file.name(), kTokenTypesKey);
    }
    if (array->items.size() != count) {
      return make_error("{}: tokenizer: metadata '{}' has {} entries for {} tokens", file.name(), kTokenTypesKey,
                        array->items.size(), count);
    }
    for (size_t i = 0; i < count; ++i) {
      int64_t raw = 0;
      if (!array->items[i].as_int64(&raw)) {
        return make_error("{}: tokenizer: metadata '{}' must be an array of integers", file.name(), kTokenTypesKey);
      }
      types_[i] = token_type_from(raw);
    }
  }
  attributes_.resize(count);
  for (size_t i = 0; i < count; ++i) attributes_[i] = attributes_of(types_[i]);
  return ok_status();
}

Status Vocab::load_special_ids(const gguf::File& file, const VocabDefaults& defaults) {
  // A default outside a small vocabulary means "none"; an id the metadata names must exist.
  auto in_vocab_or_none = [&](TokenId id) { return contains(id) ? id : TokenId{-1}; };
  auto read_id = [&](std::string_view key, TokenId fallback) -> Result<TokenId> {
    if (!file.has(key)) return fallback;
    MNEMO_ASSIGN_OR_RETURN(const int64_t id, file.get_int(key));
    if (id < 0 || id >= size()) {
      return make_error("{}: tokenizer: metadata '{}' = {} is not a token id (the vocabulary has {} tokens)",
                        file.name(), key, id, size());
    }
    return static_cast<TokenId>(id);
  };
  MNEMO_ASSIGN_OR_RETURN(bos_, read_id("tokenizer.ggml.bos_token_id", in_vocab_or_none(defaults.bos)));
  MNEMO_ASSIGN_OR_RETURN(eos_, read_id("tokenizer.ggml.eos_token_id", in_vocab_or_none(defaults.eos)));
  MNEMO_ASSIGN_OR_RETURN(unk_, read_id("tokenizer.ggml.unknown_token_id", in_vocab_or_none(defaults.unk)));
  MNEMO_ASSIGN_OR_RETURN(eot_, read_id("tokenizer.ggml.eot_token_id", -1));
  MNEMO_ASSIGN_OR_RETURN(eom_, read_id("tokenizer.ggml.eom_token_id", -1));
  MNEMO_ASSIGN_OR_RETURN(fim_pre_, read_id("tokenizer.ggml.fim_pre_token_id", -1));
  MNEMO_ASSIGN_OR_RETURN(fim_suf_, read_id("tokenizer.ggml.fim_suf_token_id", -1));
  MNEMO_ASSIGN_OR_RETURN(fim_mid_, read_id("tokenizer.ggml.fim_mid_token_id", -1));
  MNEMO_ASSIGN_OR_RETURN(fim_pad_, read_id("tokenizer.ggml.fim_pad_token_id", -1));
  MNEMO_ASSIGN_OR_RETURN(fim_rep_, read_id("tokenizer.ggml.fim_rep_token_id", -1));
  MNEMO_ASSIGN_OR_RETURN(fim_sep_, read_id("tokenizer.ggml.fim_sep_token_id", -1));
  // Older converters wrote the FIM ids under these names; they win, as in llama.cpp.
  MNEMO_ASSIGN_OR_RETURN(fim_pre_, read_id("tokenizer.ggml.prefix_token_id", fim_pre_));
  MNEMO_ASSIGN_OR_RETURN(fim_suf_, read_id("tokenizer.ggml.suffix_token_id", fim_suf_));
  MNEMO_ASSIGN_OR_RETURN(fim_mid_, read_id("tokenizer.ggml.middle_token_id", fim_mid_));

  MNEMO_ASSIGN_OR_RETURN(add_bos_, file.get_bool_or("tokenizer.ggml.add_bos_token", defaults.add_bos));
  MNEMO_ASSIGN_OR_RETURN(add_eos_, file.get_bool_or("tokenizer.ggml.add_eos_token", defaults.add_eos));
  MNEMO_ASSIGN_OR_RETURN(add_space_prefix_,
                         file.get_bool_or("tokenizer.ggml.add_space_prefix", defaults.add_space_prefix));
  clean_spaces_ = defaults.clean_spaces;
  if (add_bos_ && bos_ < 0) {
    return make_error("{}: tokenizer: add_bos_token is set but the vocabulary has no BOS token", file.name());
  }
  if (add_eos_ && eos_ < 0) {
    return make_error("{}: tokenizer: add_eos_token is set but the vocabulary has no EOS token", file.name());
  }
  return ok_status();
}

TokenId Vocab::find_first_of(std::span<const std::string_view> texts) const {
  TokenId first = -1;
  for (const std::string_view text : texts) {
    const TokenId id = find(text);
    if (id >= 0 && (first < 0 || id < first)) first = id;
  }
  return first;
}

void Vocab::derive_from_texts(const gguf::File& file) {
  auto mark_control = [&](TokenId id) { attributes_[static_cast<size_t>(id)] |= kAttrControl; };
  auto detect = [&](TokenId& role, std::span<const std::string_view> texts) {
    if (role >= 0) return;
    role = find_first_of(texts);
    if (role >= 0) mark_control(role);
  };
  detect(eot_, kEndOfTurnTexts);
  detect(eom_, kEndOfMessageTexts);
  detect(fim_pre_, kFimPrefixTexts);
  detect(fim_suf_, kFimSuffixTexts);
  detect(fim_mid_, kFimMiddleTexts);
  detect(fim_pad_, kFimPadTexts);
  detect(fim_rep_, kFimRepoTexts);
  detect(fim_sep_, kFimSeparatorTexts);

  for (TokenId id = 0; id < size(); ++id) {
    if (has_any(id, kAttrControl) && text(id).find("unused") != std::string_view::npos) {
      attributes_[static_cast<size_t>(id)] |= kAttrUnused;
    }
  }

  end_of_generation_.assign(texts_.size(), false);
  auto add_end_of_generation = [&](TokenId id) {
    if (id >= 0) end_of_generation_[static_cast<size_t>(id)] = true;
  };
  add_end_of_generation(fim_pad_);
  add_end_of_generation(fim_rep_);
  add_end_of_generation(fim_sep_);
  for (const std::string_view end_text : kEndOfGenerationTexts) {
    const TokenId id = find(end_text);
    if (id < 0) continue;
    add_end_of_generation(id);
    mark_control(id);
  }
  for (const std::string_view rendered : kAlwaysRenderedTexts) {
    if (const TokenId id = find(rendered); id >= 0) attributes_[static_cast<size_t>(id)] = kAttrUserDefined;
  }
  add_end_of_generation(eos_);
  add_end_of_generation(eot_);
  add_end_of_generation(eom_);

  auto ends_generation = [&](std::string_view token_text) {
    const TokenId id = find(token_text);
    return id >= 0 && end_of_generation_[static_cast<size_t>(id)];
  };
  // Harmony-style templates (gpt-oss, solar-open) use <|end|> between messages, not to stop.
  const bool has_call = ends_generation("<|call|>") || ends_generation("<|calls|>");
  if (ends_generation("<|end|>") &&
      ((ends_generation("<|return|>") && has_call) || (has_call && ends_generation("<|flush|>")))) {
    const TokenId end = find("<|end|>");
    end_of_generation_[static_cast<size_t>(end)] = false;
    attributes_[static_cast<size_t>(end)] = kAttrUserDefined;
  }
  // Gemma 4 and PLaMo use </s> as ordinary text.
  if (ends_generation("</s>") && (ends_generation("<|tool_response>") || ends_generation("<|plamo:eos|>"))) {
    const TokenId closing_s = find("</s>");
    end_of_generation_[static_cast<size_t>(closing_s)] = false;
    attributes_[static_cast<size_t>(closing_s)] = kAttrNormal;
  }

  // Phi-3's special tokens swallow the whitespace that follows them.
  const Result<std::string> general_name = file.get_string_or("general.name", "");
  const std::string model_name = lowercase_ascii(general_name.ok() ? *general_name : std::string());
  if (model_name.find("phi-3") != std::string::npos || model_name.find("phi3") != std::string::npos) {
    for (TokenId id = 0; id < size(); ++id) {
      if (has_any(id, kAttrControl | kAttrUserDefined | kAttrUnknown)) attributes_[static_cast<size_t>(id)] |= kAttrRstrip;
    }
    if (const TokenId id = find("</s>"); id >= 0) attributes_[static_cast<size_t>(id)] |= kAttrRstrip;
    for (const std::string_view keep : {"<unk>", "<s>", "<|endoftext|>"}) {
      if (const TokenId id = find(keep); id >= 0) attributes_[static_cast<size_t>(id)] &= static_cast<uint16_t>(~kAttrRstrip);
    }
  }
}

}  // namespace mnemo::tokenizer

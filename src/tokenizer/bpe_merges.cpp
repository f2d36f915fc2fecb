#include "tokenizer/bpe_merges.h"

#include <algorithm>
#include <limits>
#include <variant>

namespace mnemo::tokenizer {
namespace {

constexpr std::string_view kMergesKey = "tokenizer.ggml.merges";

}  // namespace

Result<BpeMerges> BpeMerges::load(const gguf::File& file, const Vocab& vocab) {
  const gguf::Value* value = file.find(kMergesKey);
  if (value == nullptr) return make_error("{}: tokenizer: metadata '{}' is missing", file.name(), kMergesKey);
  const auto* array = std::get_if<gguf::Array>(&value->v);
  if (array == nullptr || array->elem_type != gguf::ValueType::kString) {
    return make_error("{}: tokenizer: metadata '{}' must be an array of strings", file.name(), kMergesKey);
  }
  if (array->items.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    return make_error("{}: tokenizer: too many merges ({})", file.name(), array->items.size());
  }

  BpeMerges merges;
  std::vector<std::string_view> rules;
  rules.reserve(array->items.size());
  size_t total_bytes = 0;
  for (const gguf::Value& item : array->items) {
    const auto* rule = std::get_if<std::string>(&item.v);
    if (rule == nullptr) return make_error("{}: tokenizer: metadata '{}' must be an array of strings", file.name(), kMergesKey);
    rules.push_back(*rule);
    total_bytes += rule->size();
  }
  merges.storage_.resize(total_bytes);
  merges.rules_.reserve(array->items.size());
  merges.left_lengths_.reserve(array->items.size());
  size_t offset = 0;
  for (size_t rank = 0; rank < array->items.size(); ++rank) {
    const std::string_view rule = rules[rank];
    // The first space after the first byte separates the two sides (a side may itself start
    // with a space in vocabularies that do not byte-encode).
    const size_t split = rule.size() > 1 ? rule.find(' ', 1) : std::string_view::npos;
    if (split == std::string_view::npos) {
      return make_error("{}: tokenizer: merge {} '{}' is not two tokens separated by a space", file.name(), rank, rule);
    }
    for (const std::string_view side : {rule.substr(0, split), rule.substr(split + 1)}) {
      if (vocab.find(side) < 0) {
        return make_error("{}: tokenizer: merge {} '{}' refers to '{}', which is not a token", file.name(), rank, rule,
                          side);
      }
    }
    std::copy(rule.begin(), rule.end(), merges.storage_.begin() + static_cast<std::ptrdiff_t>(offset));
    merges.rules_.emplace_back(merges.storage_.data() + offset, rule.size());
    merges.left_lengths_.push_back(static_cast<uint32_t>(split));
    offset += rule.size();
  }
  // A repeated rule keeps its first (best) rank, as in llama.cpp.
  merges.index_.build(merges.rules_);
  return merges;
}

std::optional<int32_t> BpeMerges::rank(std::string_view left, std::string_view right) const {
  const int32_t found = index_.find_joined(left, ' ', right);
  // "a b c" is the rule (a, "b c"), never ("a b", c).
  if (found < 0 || left_lengths_[static_cast<size_t>(found)] != left.size()) return std::nullopt;
  return found;
}

}  // namespace mnemo::tokenizer

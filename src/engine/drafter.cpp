#include "engine/drafter.h"

#include <algorithm>

namespace mnemo {

int32_t PromptLookupDrafter::draft(std::span<const TokenId> context, int32_t max_tokens, std::vector<TokenId>& out) const {
  const auto length = static_cast<int64_t>(context.size());
  if (max_tokens <= 0) return 0;
  for (int64_t n = std::min<int64_t>(max_ngram_, length - 1); n >= min_ngram_; --n) {
    const std::span<const TokenId> suffix = context.subspan(static_cast<size_t>(length - n));
    // Latest occurrence first: a conversation repeats what it said last more than what it said
    // first. The search starts one token back, so an occurrence may overlap the suffix (a run).
    for (int64_t start = length - n - 1; start >= 0; --start) {
      if (context[static_cast<size_t>(start)] != suffix[0]) continue;
      if (!std::equal(suffix.begin(), suffix.end(), context.begin() + start)) continue;
      const int64_t follow = start + n;
      const auto count = static_cast<int32_t>(std::min<int64_t>(max_tokens, length - follow));
      out.insert(out.end(), context.begin() + follow, context.begin() + follow + count);
      return count;
    }
  }
  return 0;
}

}  // namespace mnemo

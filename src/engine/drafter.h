// Drafters for speculative decoding (issue 26): guesses of the tokens a sequence will generate
// next, made without a draft model from what the server already holds. The engine verifies a
// draft in one forward pass (the drafted tokens as extra query positions of the sequence) and
// keeps the tokens the sampler would have drawn anyway, so a draft only changes speed, never
// the output.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "model/batch.h"

namespace mnemo {

class Drafter {
 public:
  virtual ~Drafter() = default;
  // The drafter's name in metrics (mnemo_spec_draft_tokens_total{drafter="..."}).
  virtual std::string_view name() const = 0;
  // Up to `max_tokens` tokens likely to follow `context` (a sequence's prompt and what it
  // generated), appended to `out`; how many. 0: no guess worth verifying.
  virtual int32_t draft(std::span<const TokenId> context, int32_t max_tokens, std::vector<TokenId>& out) const = 0;
};

// Prompt lookup (llama.cpp's lookup decoding, vLLM's n-gram proposer): the longest n-gram that
// ends the context and also occurs earlier in it, longest first from max_ngram down to
// min_ngram; the draft is what followed its latest earlier occurrence. Code being edited, quoted
// passages, tool results repeated back and a conversation's earlier turns draft well.
class PromptLookupDrafter final : public Drafter {
 public:
  PromptLookupDrafter(int32_t min_ngram = 2, int32_t max_ngram = 4) : min_ngram_(min_ngram), max_ngram_(max_ngram) {}
  std::string_view name() const override { return "prompt_lookup"; }
  int32_t draft(std::span<const TokenId> context, int32_t max_tokens, std::vector<TokenId>& out) const override;

 private:
  int32_t min_ngram_;
  int32_t max_ngram_;
};

}  // namespace mnemo

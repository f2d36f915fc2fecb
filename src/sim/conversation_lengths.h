// The token lengths of data-set conversations, turn by turn, as the served model counts them:
// each turn's prompt (the chat template over the whole history plus the new user message) and
// its reply (the data set's reply, uncut). This is all the cache simulator needs of the text.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loadgen/dataset.h"
#include "loadgen/token_counter.h"
#include "util/result.h"

namespace mnemo::sim {

struct TurnLengths {
  int64_t prompt_tokens = 0;
  int64_t reply_tokens = 0;
};

struct ConversationLengths {
  std::string id;
  std::vector<TurnLengths> turns;
};

// Measures `count` conversations (0: all) in the order drawn from `seed` (0: file order; the
// same order `mnemo loadgen` uses). A conversation ends before the first turn whose prompt plus
// reply exceed `max_context` (the model's context length); one whose first turn alone does not
// fit has its question cut (loadgen::plan_conversation's rules), and one left with no turn is
// skipped.
Result<std::vector<ConversationLengths>> measure_conversations(const std::vector<loadgen::DatasetConversation>& dataset,
                                                               const loadgen::TokenCounter& counter, size_t count,
                                                               uint64_t seed, int32_t max_context);

}  // namespace mnemo::sim

// The workload a run replays: conversations cut to what the machine can serve, each turn with
// the exact history to send and the reply length to force.
//
// Per turn k of a conversation: the messages are the dataset's turns 0..k-1 (user message and
// dataset reply) followed by user message k; the server must generate exactly max_tokens tokens
// (the dataset reply's length in the model's tokens, capped by max_output_tokens, at least 1;
// sent with ignore_eos). A reply in the history is the dataset reply cut to that same length, so
// the history grows as it would had the model written the dataset's reply: what each turn adds
// to the context is what the server generated, plus the next question.
//
// Fitting the context (max_context): a turn whose prompt plus reply would exceed it ends the
// conversation there; if it is the first turn, its user message is cut to fit instead, so every
// conversation keeps at least one turn.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "chat/chat_template.h"
#include "loadgen/dataset.h"
#include "loadgen/token_counter.h"
#include "util/result.h"

namespace mnemo::loadgen {

struct WorkloadLimits {
  int32_t max_context = 1024;       // prompt + reply tokens of any turn
  int32_t max_output_tokens = 64;   // cap on the forced reply length
  int32_t max_turns = 0;            // turns per conversation (0: all that fit)
};

struct PlannedTurn {
  int32_t n_messages = 0;     // messages[0, n_messages) is this turn's request: history + question
  int32_t max_tokens = 0;     // forced reply length
  int32_t prompt_tokens = 0;  // the prompt's length as counted here (the server reports its own)
};

struct PlannedConversation {
  std::string id;
  std::vector<ChatMessage> messages;  // user, assistant, user, ... (replies cut to max_tokens)
  std::vector<PlannedTurn> turns;

  // The new user message of a turn (what the Responses API sends with previous_response_id).
  const ChatMessage& question(size_t turn) const { return messages[static_cast<size_t>(turns[turn].n_messages) - 1]; }
};

// Plans one conversation; an Error if the chat template fails on it. A conversation whose first
// question cannot be cut to fit (the template alone exceeds the budget) gets no turns.
Result<PlannedConversation> plan_conversation(const DatasetConversation& conversation, const TokenCounter& counter,
                                              const WorkloadLimits& limits);

// The order conversations are drawn in: a permutation of [0, n) from `seed` (identity when
// seed is 0), so that runs with one seed replay the same conversations.
std::vector<size_t> conversation_order(size_t n, uint64_t seed);

// Plans the conversations order[first], order[first + 1], ... (wrapping around) until `count`
// of them have at least one turn or the data set is exhausted.
Result<std::vector<PlannedConversation>> plan_workload(const std::vector<DatasetConversation>& dataset,
                                                       const std::vector<size_t>& order, size_t first, size_t count,
                                                       const TokenCounter& counter, const WorkloadLimits& limits);

int64_t total_turns(const std::vector<PlannedConversation>& workload);

}  // namespace mnemo::loadgen

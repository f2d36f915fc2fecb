#include "loadgen/workload.h"

#include <algorithm>
#include <numeric>
#include <optional>
#include <span>

namespace mnemo::loadgen {
namespace {

// Cuts the only question of a first turn until the prompt and reply fit. Token counts of a cut
// text and of the rendered prompt are not exactly additive (merges at the edges), so it
// re-measures and tries again a few times. Nothing when even an empty question would not fit.
Result<std::optional<int32_t>> fit_first_question(std::vector<ChatMessage>& messages, const TokenCounter& counter,
                                   int32_t prompt_budget) {
  ChatMessage& question = messages.back();
  for (int attempt = 0; attempt < 8; ++attempt) {
    MNEMO_ASSIGN_OR_RETURN(const int32_t prompt_tokens, counter.count_prompt(messages));
    if (prompt_tokens <= prompt_budget) return std::optional<int32_t>(prompt_tokens);
    const int32_t question_tokens = counter.count_text(question.content);
    const int32_t keep = question_tokens - (prompt_tokens - prompt_budget) - attempt;
    if (keep <= 0) return std::optional<int32_t>();
    question.content = counter.truncate_text(question.content, keep);
  }
  return std::optional<int32_t>();
}

}  // namespace

Result<PlannedConversation> plan_conversation(const DatasetConversation& conversation, const TokenCounter& counter,
                                              const WorkloadLimits& limits) {
  PlannedConversation planned;
  planned.id = conversation.id;
  for (const DatasetTurn& turn : conversation.turns) {
    if (limits.max_turns > 0 && static_cast<int32_t>(planned.turns.size()) >= limits.max_turns) break;
    const int32_t max_tokens = std::clamp(counter.count_text(turn.reply), 1, std::max(1, limits.max_output_tokens));
    const int32_t prompt_budget = limits.max_context - max_tokens;
    planned.messages.push_back({"user", turn.user});

    int32_t prompt_tokens = 0;
    if (planned.turns.empty()) {
      MNEMO_ASSIGN_OR_RETURN(const std::optional<int32_t> fitted,
                             fit_first_question(planned.messages, counter, prompt_budget));
      if (!fitted) {
        planned.messages.clear();
        break;
      }
      prompt_tokens = *fitted;
    } else {
      MNEMO_ASSIGN_OR_RETURN(prompt_tokens, counter.count_prompt(planned.messages));
      if (prompt_tokens > prompt_budget) {
        planned.messages.pop_back();
        break;
      }
    }
    planned.turns.push_back({static_cast<int32_t>(planned.messages.size()), max_tokens, prompt_tokens});
    planned.messages.push_back({"assistant", counter.truncate_text(turn.reply, max_tokens)});
  }
  // The last reply is never sent as history.
  if (!planned.messages.empty() && planned.messages.back().role == "assistant") planned.messages.pop_back();
  return planned;
}

std::vector<size_t> conversation_order(size_t n, uint64_t seed) {
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  if (seed != 0) {
    std::mt19937_64 rng(seed);
    std::shuffle(order.begin(), order.end(), rng);
  }
  return order;
}

Result<std::vector<PlannedConversation>> plan_workload(const std::vector<DatasetConversation>& dataset,
                                                       const std::vector<size_t>& order, size_t first, size_t count,
                                                       const TokenCounter& counter, const WorkloadLimits& limits) {
  std::vector<PlannedConversation> workload;
  for (size_t i = 0; i < order.size() && workload.size() < count; ++i) {
    const DatasetConversation& conversation = dataset[order[(first + i) % order.size()]];
    auto planned = plan_conversation(conversation, counter, limits);
    if (!planned.ok()) return planned.error().with_context(fmt::format("conversation '{}'", conversation.id));
    if (!planned->turns.empty()) workload.push_back(std::move(*planned));
  }
  return workload;
}

int64_t total_turns(const std::vector<PlannedConversation>& workload) {
  int64_t n = 0;
  for (const PlannedConversation& c : workload) n += static_cast<int64_t>(c.turns.size());
  return n;
}

}  // namespace mnemo::loadgen

#include "sim/conversation_lengths.h"

#include "loadgen/workload.h"

namespace mnemo::sim {

Result<std::vector<ConversationLengths>> measure_conversations(const std::vector<loadgen::DatasetConversation>& dataset,
                                                               const loadgen::TokenCounter& counter, size_t count,
                                                               uint64_t seed, int32_t max_context) {
  if (max_context < 2) return make_error("max_context must be at least 2 tokens, got {}", max_context);
  const std::vector<size_t> order = loadgen::conversation_order(dataset.size(), seed);
  // Replies are never capped below the context: the simulator wants the data set's lengths.
  const loadgen::WorkloadLimits limits{.max_context = max_context, .max_output_tokens = max_context, .max_turns = 0};
  MNEMO_ASSIGN_OR_RETURN(const std::vector<loadgen::PlannedConversation> planned,
                         loadgen::plan_workload(dataset, order, 0, count == 0 ? dataset.size() : count, counter, limits));
  std::vector<ConversationLengths> out;
  out.reserve(planned.size());
  for (const loadgen::PlannedConversation& conversation : planned) {
    ConversationLengths lengths{conversation.id, {}};
    for (const loadgen::PlannedTurn& turn : conversation.turns) lengths.turns.push_back({turn.prompt_tokens, turn.max_tokens});
    out.push_back(std::move(lengths));
  }
  return out;
}

}  // namespace mnemo::sim

#include "sim/arrival_schedule.h"

#include <random>

namespace mnemo::sim {

Trace schedule_arrivals(const std::vector<ConversationLengths>& conversations, const ArrivalOptions& options) {
  std::mt19937_64 rng(options.seed);
  std::exponential_distribution<double> arrival_gap(options.conversations_per_second);
  std::vector<double> arrivals;
  arrivals.reserve(conversations.size());
  double clock = 0;
  for (size_t i = 0; i < conversations.size(); ++i) {
    clock += arrival_gap(rng);
    arrivals.push_back(clock);
  }

  Trace trace;
  trace.reserve(conversations.size());
  for (size_t i = 0; i < conversations.size(); ++i) {
    TraceConversation conversation{conversations[i].id, {}};
    double start = arrivals[i];
    for (const TurnLengths& lengths : conversations[i].turns) {
      if (!conversation.turns.empty()) start = conversation.turns.back().end_s + options.think.sample(rng);
      const double end = start + static_cast<double>(lengths.reply_tokens) * options.decode_seconds_per_token;
      conversation.turns.push_back({start, end, lengths.prompt_tokens, lengths.reply_tokens});
    }
    trace.push_back(std::move(conversation));
  }
  return trace;
}

}  // namespace mnemo::sim

// The trace the cache simulator replays: conversations whose turns arrive at fixed times with
// known prompt and reply lengths in tokens. A trace is the same for every policy (its times do
// not depend on what the cache hits), so policies are compared on identical traffic and the
// oracle can know the future exactly.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mnemo::sim {

struct TraceTurn {
  double start_s = 0;         // the prompt arrives
  double end_s = 0;           // the reply is finished; the conversation's chunks are pinned in between
  int64_t prompt_tokens = 0;  // the whole history so far plus the new user message
  int64_t reply_tokens = 0;
};

// Turn t's prompt begins with turn t-1's prompt and reply (the history is resent verbatim), so
// a conversation is one growing token sequence and its chunks are shared between its turns.
struct TraceConversation {
  std::string id;
  std::vector<TraceTurn> turns;
};

using Trace = std::vector<TraceConversation>;

}  // namespace mnemo::sim

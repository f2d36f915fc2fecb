// One run of the load generator against one server: conversations of the workload start as a
// Poisson process at `rate` per second (the first at time 0); each next turn is sent a think
// time after the previous reply ended. Open loop: arrivals do not wait for the server, except
// that at most `max_in_flight` requests are outstanding (a safety cap; a turn held by it is sent
// late, and the delay is recorded as sent_s - scheduled_s).
//
// It always ends by itself: when every turn is done; with a duration, conversations that would
// arrive after `duration_s` do not start, the started ones go on, and `drain_timeout_s` after the
// duration whatever is left is dropped (turns not yet sent) or aborted (requests running).
// Requests time out after the endpoint's request_timeout_s.
//
// Chat Completions turns with the data set's history do not depend on earlier replies, so a
// failed turn does not end its conversation. A failed Responses API turn does (there is no
// response to chain the next turn to), and so does a failed turn whose reply the next turn's
// history needs (History::kModel).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loadgen/openai_client.h"
#include "loadgen/request_record.h"
#include "loadgen/think_time.h"
#include "loadgen/workload.h"

namespace mnemo::loadgen {

struct RunConfig {
  double rate = 0.1;  // conversations per second
  double duration_s = 0.0;        // conversations arrive during this many seconds (0: all of them)
  double drain_timeout_s = 120.0;  // after the duration, the started conversations get this long
  int32_t max_in_flight = 32;
  uint64_t seed = 1;  // arrivals and think times
  bool show_progress = true;
  std::string label;  // shown on the progress line
};

struct RunResult {
  std::vector<RequestRecord> records;  // in order of completion
  int64_t turns_planned = 0;  // turns of the conversations that started
  double wall_s = 0.0;
};

// When each conversation starts and how long its user thinks after each turn: drawn up front
// from the seed, so that a run's schedule does not depend on how fast the server answers.
struct Schedule {
  std::vector<double> arrival_s;                 // per conversation
  std::vector<std::vector<double>> think_s;      // per conversation, per turn after the first
};
Schedule make_schedule(const std::vector<PlannedConversation>& workload, double rate, const ThinkTime& think,
                       uint64_t seed);

RunResult run_load(const std::vector<PlannedConversation>& workload, const ThinkTime& think, const ServerEndpoint& endpoint,
                   Api api, const RequestOptions& options, const RunConfig& config);

}  // namespace mnemo::loadgen

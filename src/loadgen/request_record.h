// What one request of a run did, as the client saw it and as the server reported it. Times are
// seconds since the run started, on the client's steady clock.
#pragma once

#include <cstdint>
#include <string>

namespace mnemo::loadgen {

struct RequestRecord {
  int32_t conversation = 0;     // index in the run's workload
  std::string conversation_id;  // the data set's id
  int32_t turn = 0;             // 0 for a conversation's first turn
  int32_t max_tokens = 0;       // the forced reply length
  int32_t planned_prompt_tokens = 0;

  double scheduled_s = 0.0;     // when the turn became due (arrival or end of think time)
  double sent_s = 0.0;          // when it was sent: later than scheduled only if the in-flight cap held it
  double first_token_s = -1.0;  // first streamed text; -1 if none came
  double finished_s = 0.0;

  // As reported by the server (-1: not reported).
  int32_t prompt_tokens = -1;
  int32_t cached_tokens = -1;
  int32_t completion_tokens = -1;
  std::string response_id;  // the Responses API's id, for the next turn's previous_response_id
  std::string reply_text;   // the streamed reply, for the next turn's history (History::kModel)

  int http_status = 0;
  bool ok = false;
  std::string error;  // why it failed

  double ttft() const { return first_token_s - sent_s; }
  double e2e() const { return finished_s - sent_s; }
  // Time per output token after the first; only defined for two or more tokens.
  bool has_tpot() const { return completion_tokens >= 2 && first_token_s >= 0.0; }
  double tpot() const { return (finished_s - first_token_s) / (completion_tokens - 1); }
};

}  // namespace mnemo::loadgen

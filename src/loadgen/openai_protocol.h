// The OpenAI wire format of a benchmark request, kept apart from the HTTP transport so that it
// can be tested on its own: the body of one turn (Chat Completions with the whole history, or
// the Responses API chained by previous_response_id), and the reading of its streamed reply.
//
// Every request streams with usage and forces its reply length: max_tokens (max_output_tokens)
// plus "ignore_eos": true, which llama-server, vLLM and Mnemo accept.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "loadgen/request_record.h"
#include "loadgen/sse_reader.h"
#include "loadgen/workload.h"

namespace mnemo::loadgen {

enum class Api {
  kChatCompletions,  // POST /v1/chat/completions, the whole history each turn (stateless)
  kResponses,        // POST /v1/responses, the new question and previous_response_id (stateful)
};

// Whose replies a Chat Completions turn's history holds.
enum class History {
  kDataset,  // the data set's replies (cut to the forced length): every system gets the same prompts
  kModel,    // the replies this server generated for the earlier turns, as a real chat client sends
};

struct RequestOptions {
  std::string model;
  double temperature = 0.0;
  History history = History::kDataset;
};

// What the earlier turns of a conversation left for the next one.
struct ConversationState {
  std::string previous_response_id;       // the Responses API's chain
  std::vector<std::string> model_replies;  // the server's reply text of each earlier turn (History::kModel)
};

const char* api_path(Api api);

// With History::kModel the assistant messages of the history are state.model_replies, in order
// (one per earlier turn).
nlohmann::json chat_request_body(const PlannedConversation& conversation, size_t turn, const RequestOptions& options,
                                 const ConversationState& state = {});
nlohmann::json responses_request_body(const PlannedConversation& conversation, size_t turn,
                                      const std::string& previous_response_id, const RequestOptions& options);

// Reads the events of one streamed reply into a record: the time of the first text, the end,
// the reply's text, and the token counts the server reports. Chat Completions: usage (with
// prompt_tokens_details.cached_tokens) in the last chunk; llama-server's "timings" (cache_n,
// prompt_n, predicted_n) fill what usage lacks. Responses API: the usage of the terminal
// response.completed / response.incomplete event.
class StreamedReply {
 public:
  explicit StreamedReply(Api api) : api_(api) {}

  // Returns false once the stream has said its last word (done, or an error).
  bool on_event(const SseEvent& event, double now_s, RequestRecord& record);
  bool finished() const { return finished_; }
  // Fills what the server left unreported (completion tokens from the text chunks seen) and
  // decides whether the request succeeded.
  void finish(RequestRecord& record) const;

 private:
  bool on_chat_chunk(const nlohmann::json& chunk, double now_s, RequestRecord& record);
  bool on_responses_event(const nlohmann::json& payload, double now_s, RequestRecord& record);
  void take_text(const nlohmann::json& text, double now_s, RequestRecord& record);
  void take_reasoning(const nlohmann::json& text, double now_s, RequestRecord& record);

  Api api_;
  bool finished_ = false;
  int32_t text_chunks_ = 0;
  int32_t timings_cache_n_ = -1;
  int32_t timings_prompt_n_ = -1;
  int32_t timings_predicted_n_ = -1;
  std::string error_;
};

}  // namespace mnemo::loadgen

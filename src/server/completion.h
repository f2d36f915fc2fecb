// Runs one chat-completion or completion request against the engine and shapes its results as
// OpenAI does: whole JSON responses, or server-sent-event chunks ending with "data: [DONE]".
#pragma once

#include <functional>
#include <memory>
#include <chrono>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "server/api_error.h"
#include "server/openai_request.h"

namespace mnemo::server {

// usage.prompt_tokens_details (and input_tokens_details): OpenAI's cached_tokens, plus where the
// reused KV came from and how many dropped cached tokens were computed again.
nlohmann::json cached_tokens_details(const RequestUsage& usage);


enum class Endpoint { kChat, kCompletions };

class Completion {
 public:
  Completion(Endpoint endpoint, std::string model_id, ParsedRequest request, std::shared_ptr<RequestStream> stream,
             const Tokenizer& tokenizer);

  // Whole response: waits for the request to finish.
  nlohmann::json run_to_completion();
  // Whole response, without blocking: takes the events ready (waiting up to `wait` for the
  // first), true once the request is over; whole_response() is then the answer.
  bool collect(std::chrono::milliseconds wait);
  nlohmann::json whole_response() const;
  // Streaming: returns the next SSE payload(s) to write ("" while nothing is ready yet, after
  // waiting up to `wait` for an event), and sets `done` after the final "data: [DONE]".
  std::string next_events(bool& done, std::chrono::milliseconds wait);

  // Sees every event of the request as it is relayed (a KV replica follows the tokens).
  void set_observer(std::function<void(const StreamEvent&)> observer) { observer_ = std::move(observer); }
  // Tokens of the request whose KV its replica holds; reported in the stream ("mnemo_replicated")
  // when the client asked for its tokens, so the router knows how far a failover can go.
  void set_replica_progress(std::function<int32_t()> progress) { replica_progress_ = std::move(progress); }

  void cancel() { stream_->cancel(); }
  bool streaming() const { return request_.stream; }

 private:
  nlohmann::json chunk(nlohmann::json choices) const;
  nlohmann::json usage_json() const;
  nlohmann::json logprobs_json(const TokenDelta& delta) const;

  Endpoint endpoint_;
  std::string model_id_;
  std::string id_;
  int64_t created_;
  ParsedRequest request_;
  std::shared_ptr<RequestStream> stream_;
  const Tokenizer& tokenizer_;
  RequestUsage usage_;
  std::function<void(const StreamEvent&)> observer_;
  std::function<int32_t()> replica_progress_;
  int32_t replicated_reported_ = 0;
  bool role_sent_ = false;
  bool finished_ = false;
  // What collect() has gathered, per choice.
  std::vector<std::string> texts_;
  std::vector<std::string> reasons_;
  std::vector<nlohmann::json> logprobs_;
  std::string error_;
};

}  // namespace mnemo::server

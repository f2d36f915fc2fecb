// Chat completions and completions: how their replies are shaped from the engine's events.
#pragma once

#include <functional>
#include <memory>
#include <chrono>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/reasoning.h"
#include "engine/engine.h"
#include "server/api_error.h"
#include "server/openai_request.h"
#include "server/reply_shaper.h"

namespace mnemo::server {

// usage.prompt_tokens_details (and input_tokens_details): OpenAI's cached_tokens, plus where the
// reused KV came from and how many dropped cached tokens were computed again.
nlohmann::json cached_tokens_details(const RequestUsage& usage);


enum class Endpoint { kChat, kCompletions };

// Chat completions and completions as OpenAI shapes them (a ReplyShaper): whole JSON
// responses, or server-sent-event chunks ending with "data: [DONE]".
class Completion final : public ReplyShaper {
 public:
  Completion(Endpoint endpoint, std::string model_id, ParsedRequest request, const Tokenizer& tokenizer);

  // Chat: the opening chunk of each choice (its role).
  std::string open_stream() override;
  bool stream(const StreamEvent& event, std::string& out) override;
  bool gather(const StreamEvent& event) override;
  Whole whole() override;

  bool streaming() const { return request_.stream; }

 private:
  nlohmann::json chunk(nlohmann::json choices) const;
  nlohmann::json usage_json() const;
  nlohmann::json logprobs_json(const TokenDelta& delta) const;
  nlohmann::json whole_response() const;
  // Chat with tools: the reply is read for calls once whole, so its text is held back in a stream.
  bool reads_tool_calls() const { return endpoint_ == Endpoint::kChat && request_.tool_use.calls_possible(); }
  // The chunks that give a held-back choice's reply: its content, then each call (id and name,
  // then arguments), as OpenAI streams them.
  std::string release_choice(int32_t choice);
  bool splits_reasoning() const { return endpoint_ == Endpoint::kChat && request_.reasoning.has_value(); }
  // A streamed delta chunk of one choice: its reasoning and content (each only when not empty).
  std::string delta_chunk(int32_t choice, const ReasoningSplitter::Pieces& pieces, const nlohmann::json& logprobs) const;

  Endpoint endpoint_;
  std::string model_id_;
  std::string id_;
  int64_t created_;
  ParsedRequest request_;
  const Tokenizer& tokenizer_;
  RequestUsage usage_;
  // What gather() has gathered, per choice.
  std::vector<std::string> texts_;
  std::vector<std::string> reasons_;
  std::vector<nlohmann::json> logprobs_;
  std::string error_;
  std::string echo_;  // completions with echo: the prompt's text, before each choice's
  // When the reply's reasoning is split off (request_.reasoning): per choice, the splitter of its
  // streamed text, and (tools, streamed) the content held back until the choice ends.
  std::vector<ReasoningSplitter> splitters_;
  std::vector<std::string> contents_;
  std::vector<ReasoningTokenCounter> reasoning_tokens_;  // per choice
};

}  // namespace mnemo::server

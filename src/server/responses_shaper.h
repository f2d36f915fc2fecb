// The Responses API's reply (a ReplyShaper): the response object when whole, or OpenAI's typed
// event stream (response.created, response.in_progress, the output item and content part opened,
// text deltas, then their ends and response.completed / response.incomplete), each event with a
// rising sequence_number and no [DONE]. A stored turn is acknowledged only once stored: if
// storing fails, a whole reply is that error, a stream ends with "error" and response.failed.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "chat/reasoning.h"
#include "chat/tool_calls.h"
#include "engine/request.h"
#include "server/api_error.h"
#include "server/reply_shaper.h"

namespace mnemo::server {

// What a response says of itself whatever its state.
struct ResponseIdentity {
  std::string id;
  std::string message_id;
  int64_t created_at = 0;
  std::string model;
  std::string previous_id;                    // "" : none
  nlohmann::json instructions = nullptr;      // as the request gave them
  int32_t max_output_tokens = 0;
  float temperature = 1.0f;
  float top_p = 1.0f;
  bool store = true;
  // With tools, the reply is read for calls once whole (held back in a stream), and its output
  // is a message and/or function_call items.
  bool reads_tool_calls = false;
  ToolFormat tool_format = ToolFormat::kGeneric;
  bool tool_envelope = false;
  nlohmann::json tools = nlohmann::json::array();  // as the request gave them
  nlohmann::json tool_choice = "auto";
  bool parallel_tool_calls = true;
  // The reply's reasoning, split off (chat/reasoning.h), is a `reasoning` item before the
  // message: its tags (null: none), whether the prompt opened them, and the item's id.
  std::optional<ReasoningTags> reasoning;
  bool reasoning_open = false;
  std::string reasoning_id;
};

class ResponsesShaper final : public ReplyShaper {
 public:
  // Stores the finished response (when it is to be stored); the error, if it could not be.
  using StoreTurn = std::function<std::optional<ApiError>(const nlohmann::json& response)>;

  // `resumed_text`: what a failed instance had already answered (a resumed turn goes on from it).
  // `report_tokens`: each delta names its token (a router that may resume the stream).
  ResponsesShaper(ResponseIdentity identity, std::string resumed_text, bool report_tokens, StoreTurn store_turn);

  std::string open_stream() override;
  bool stream(const StreamEvent& event, std::string& out) override;
  bool gather(const StreamEvent& event) override;
  Whole whole() override;

  // The response object: "in_progress" (no output yet), "completed" or "incomplete".
  nlohmann::json response(const std::string& status, const RequestUsage* usage) const;

 private:
  std::string event(const std::string& type, nlohmann::json payload);
  std::string end_of_stream(const RequestUsage& usage);
  // The response's final event (completed, incomplete, or failed when it could not be stored).
  std::string end_events(const RequestUsage& usage);
  // The output items of the finished reply (its text read for calls when reads_tool_calls).
  nlohmann::json output_items() const;
  // A held-back reply's items as the stream would have given them.
  std::string release_items();
  // Streamed with reasoning: the reasoning item opened (at output index 0) and its deltas, then,
  // once the answer starts, the reasoning item closed and the message opened after it.
  std::string stream_pieces(const ReasoningSplitter::Pieces& pieces, int32_t token);
  std::string open_message();
  std::string close_reasoning();
  // The message's place among the output items: after the reasoning item, if there is one.
  int message_index() const { return reasoning_text_.empty() ? 0 : 1; }

  ResponseIdentity identity_;
  bool report_tokens_;
  StoreTurn store_turn_;
  std::string text_;  // the reply as the model wrote it (reasoning included)
  std::optional<ReasoningSplitter> splitter_;  // streamed, when the reasoning is split off
  std::string reasoning_text_;                 // streamed so far
  std::string message_text_;                   // streamed so far (the answer)
  bool reasoning_open_item_ = false;
  bool message_opened_ = false;
  std::optional<ReasoningTokenCounter> reasoning_tokens_;  // streamed or gathered
  bool length_stop_ = false;
  int64_t sequence_ = 0;
  Whole whole_;
};

}  // namespace mnemo::server

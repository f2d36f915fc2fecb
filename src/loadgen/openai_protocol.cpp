#include "loadgen/openai_protocol.h"

namespace mnemo::loadgen {

using nlohmann::json;

const char* api_path(Api api) { return api == Api::kResponses ? "/v1/responses" : "/v1/chat/completions"; }

json chat_request_body(const PlannedConversation& conversation, size_t turn, const RequestOptions& options,
                       const ConversationState& state) {
  const PlannedTurn& planned = conversation.turns[turn];
  json messages = json::array();
  size_t replies = 0;
  for (int32_t i = 0; i < planned.n_messages; ++i) {
    const ChatMessage& m = conversation.messages[static_cast<size_t>(i)];
    const bool own_reply =
        options.history == History::kModel && m.role == "assistant" && replies < state.model_replies.size();
    messages.push_back({{"role", m.role}, {"content", own_reply ? state.model_replies[replies] : m.content}});
    if (m.role == "assistant") ++replies;
  }
  json body = {{"messages", std::move(messages)},
               {"max_tokens", planned.max_tokens},
               {"ignore_eos", true},
               {"temperature", options.temperature},
               {"stream", true},
               {"stream_options", {{"include_usage", true}}}};
  if (!options.model.empty()) body["model"] = options.model;
  return body;
}

json responses_request_body(const PlannedConversation& conversation, size_t turn,
                            const std::string& previous_response_id, const RequestOptions& options) {
  const ChatMessage& question = conversation.question(turn);
  json body = {{"input", json::array({{{"role", "user"}, {"content", question.content}}})},
               {"max_output_tokens", conversation.turns[turn].max_tokens},
               {"ignore_eos", true},
               {"temperature", options.temperature},
               {"store", true},
               {"stream", true}};
  if (!previous_response_id.empty()) body["previous_response_id"] = previous_response_id;
  if (!options.model.empty()) body["model"] = options.model;
  return body;
}

namespace {

int32_t int_or(const json& object, const char* key, int32_t fallback) {
  const auto it = object.find(key);
  return it != object.end() && it->is_number() ? it->get<int32_t>() : fallback;
}

std::string error_text(const json& error) {
  if (error.is_object() && error.contains("message") && error["message"].is_string()) return error["message"].get<std::string>();
  return error.dump();
}

}  // namespace

void StreamedReply::take_text(const json& text, double now_s, RequestRecord& record) {
  if (!text.is_string() || text.get_ref<const std::string&>().empty()) return;
  record.reply_text += text.get_ref<const std::string&>();
  ++text_chunks_;
  if (record.first_token_s < 0.0) record.first_token_s = now_s;
}

// Reasoning counts for the first token and the chunk count, but is not part of the reply a
// client sends back as history.
void StreamedReply::take_reasoning(const json& text, double now_s, RequestRecord& record) {
  if (!text.is_string() || text.get_ref<const std::string&>().empty()) return;
  ++text_chunks_;
  if (record.first_token_s < 0.0) record.first_token_s = now_s;
}

bool StreamedReply::on_event(const SseEvent& event, double now_s, RequestRecord& record) {
  if (finished_) return false;
  if (event.data == "[DONE]") {
    finished_ = true;
    record.finished_s = now_s;
    return false;
  }
  const json payload = json::parse(event.data, nullptr, /*allow_exceptions=*/false);
  if (!payload.is_object()) return true;  // not ours to judge: keep reading
  if (payload.contains("error")) {
    error_ = error_text(payload["error"]);
    finished_ = true;
    record.finished_s = now_s;
    return false;
  }
  return api_ == Api::kResponses ? on_responses_event(payload, now_s, record) : on_chat_chunk(payload, now_s, record);
}

bool StreamedReply::on_chat_chunk(const json& chunk, double now_s, RequestRecord& record) {
  if (const auto choices = chunk.find("choices"); choices != chunk.end() && choices->is_array()) {
    for (const json& choice : *choices) {
      if (!choice.is_object() || !choice.contains("delta") || !choice["delta"].is_object()) continue;
      const json& delta = choice["delta"];
      if (delta.contains("content")) take_text(delta["content"], now_s, record);
      if (delta.contains("reasoning_content")) take_reasoning(delta["reasoning_content"], now_s, record);
    }
  }
  if (const auto usage = chunk.find("usage"); usage != chunk.end() && usage->is_object()) {
    record.prompt_tokens = int_or(*usage, "prompt_tokens", record.prompt_tokens);
    record.completion_tokens = int_or(*usage, "completion_tokens", record.completion_tokens);
    if (const auto details = usage->find("prompt_tokens_details"); details != usage->end() && details->is_object()) {
      record.cached_tokens = int_or(*details, "cached_tokens", record.cached_tokens);
    }
  }
  if (const auto timings = chunk.find("timings"); timings != chunk.end() && timings->is_object()) {
    timings_cache_n_ = int_or(*timings, "cache_n", timings_cache_n_);
    timings_prompt_n_ = int_or(*timings, "prompt_n", timings_prompt_n_);
    timings_predicted_n_ = int_or(*timings, "predicted_n", timings_predicted_n_);
  }
  record.finished_s = now_s;  // the end of the stream, should it close without [DONE]
  return true;
}

bool StreamedReply::on_responses_event(const json& payload, double now_s, RequestRecord& record) {
  const std::string type = payload.value("type", "");
  record.finished_s = now_s;
  if (type == "response.output_text.delta") {
    if (payload.contains("delta")) take_text(payload["delta"], now_s, record);
    return true;
  }
  const auto response = payload.find("response");
  if (response == payload.end() || !response->is_object()) return true;
  if (response->contains("id") && (*response)["id"].is_string()) record.response_id = (*response)["id"].get<std::string>();
  if (type == "response.failed") {
    error_ = response->contains("error") ? error_text((*response)["error"]) : "response.failed";
    finished_ = true;
    return false;
  }
  if (type != "response.completed" && type != "response.incomplete") return true;
  if (const auto usage = response->find("usage"); usage != response->end() && usage->is_object()) {
    record.prompt_tokens = int_or(*usage, "input_tokens", record.prompt_tokens);
    record.completion_tokens = int_or(*usage, "output_tokens", record.completion_tokens);
    if (const auto details = usage->find("input_tokens_details"); details != usage->end() && details->is_object()) {
      record.cached_tokens = int_or(*details, "cached_tokens", record.cached_tokens);
    }
  }
  finished_ = true;
  return false;
}

void StreamedReply::finish(RequestRecord& record) const {
  if (record.cached_tokens < 0) record.cached_tokens = timings_cache_n_;
  if (record.prompt_tokens < 0 && timings_prompt_n_ >= 0) {
    record.prompt_tokens = timings_prompt_n_ + std::max(0, timings_cache_n_);
  }
  if (record.completion_tokens < 0) record.completion_tokens = timings_predicted_n_;
  if (record.completion_tokens < 0 && text_chunks_ > 0) record.completion_tokens = text_chunks_;
  if (!error_.empty()) {
    record.ok = false;
    record.error = error_;
  } else if (!finished_) {
    record.ok = false;
    record.error = "the stream ended before its final event";
  } else if (record.first_token_s < 0.0) {
    record.ok = false;
    record.error = "no text was streamed";
  } else {
    record.ok = true;
  }
}

}  // namespace mnemo::loadgen

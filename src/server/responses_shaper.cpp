#include "server/responses_shaper.h"

#include "server/completion.h"

namespace mnemo::server {
namespace {

using nlohmann::json;

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

json text_part(const std::string& text) {
  return {{"type", "output_text"}, {"text", text}, {"annotations", json::array()}};
}

}  // namespace

ResponsesShaper::ResponsesShaper(ResponseIdentity identity, std::string resumed_text, bool report_tokens, StoreTurn store_turn)
    : identity_(std::move(identity)),
      report_tokens_(report_tokens),
      store_turn_(std::move(store_turn)),
      text_(std::move(resumed_text)) {}

json ResponsesShaper::response(const std::string& status, const RequestUsage* usage) const {
  json output = json::array();
  if (status != "in_progress") {
    json content = json::array();
    if (!text_.empty()) content.push_back(text_part(text_));
    output.push_back({{"type", "message"}, {"id", identity_.message_id}, {"role", "assistant"}, {"status", "completed"}, {"content", content}});
  }
  const bool length_stop = status == "incomplete";
  json r = {{"id", identity_.id},
            {"object", "response"},
            {"created_at", identity_.created_at},
            {"model", identity_.model},
            {"status", status},
            {"incomplete_details", length_stop ? json{{"reason", "max_output_tokens"}} : json(nullptr)},
            {"instructions", identity_.instructions},
            {"max_output_tokens", identity_.max_output_tokens},
            {"previous_response_id", identity_.previous_id.empty() ? json(nullptr) : json(identity_.previous_id)},
            {"temperature", identity_.temperature},
            {"top_p", identity_.top_p},
            {"store", identity_.store},
            {"output", output},
            {"error", nullptr},
            {"usage", nullptr}};
  if (usage != nullptr) {
    r["usage"] = {{"input_tokens", usage->prompt_tokens},
                  {"input_tokens_details", cached_tokens_details(*usage)},
                  {"output_tokens", usage->completion_tokens},
                  {"output_tokens_details", {{"reasoning_tokens", 0}}},
                  {"total_tokens", usage->prompt_tokens + usage->completion_tokens}};
  }
  return r;
}

std::string ResponsesShaper::event(const std::string& type, json payload) {
  payload["type"] = type;
  payload["sequence_number"] = sequence_++;
  return "event: " + type + "\ndata: " + dump(payload) + "\n\n";
}

std::string ResponsesShaper::open_stream() {
  const json initial = response("in_progress", nullptr);
  std::string out = event("response.created", {{"response", initial}});
  out += event("response.in_progress", {{"response", initial}});
  out += event("response.output_item.added",
               {{"output_index", 0},
                {"item", {{"type", "message"}, {"id", identity_.message_id}, {"role", "assistant"}, {"status", "in_progress"}, {"content", json::array()}}}});
  out += event("response.content_part.added",
               {{"item_id", identity_.message_id}, {"output_index", 0}, {"content_index", 0}, {"part", text_part("")}});
  return out;
}

bool ResponsesShaper::stream(const StreamEvent& e, std::string& out) {
  if (auto* d = std::get_if<TokenDelta>(&e)) {
    // A router that may resume the stream elsewhere learns every token, even one whose text is
    // held back, and how far the replica got.
    if (d->text.empty() && !report_tokens_) return false;
    text_ += d->text;
    json delta = {{"item_id", identity_.message_id}, {"output_index", 0}, {"content_index", 0}, {"delta", d->text}, {"logprobs", json::array()}};
    if (report_tokens_ && d->token >= 0) delta["mnemo_token"] = d->token;
    if (report_tokens_) {
      if (const auto replicated = replica_progress_change()) delta["mnemo_replicated"] = *replicated;
    }
    out += event("response.output_text.delta", std::move(delta));
    return false;
  }
  if (auto* f = std::get_if<ChoiceFinished>(&e)) {
    length_stop_ = f->reason == FinishReason::kLength;
    return false;
  }
  out += end_of_stream(std::get<RequestDone>(e).usage);
  return true;
}

std::string ResponsesShaper::end_of_stream(const RequestUsage& usage) {
  const json part = text_part(text_);
  std::string out = event("response.output_text.done",
                          {{"item_id", identity_.message_id}, {"output_index", 0}, {"content_index", 0}, {"text", text_}});
  out += event("response.content_part.done", {{"item_id", identity_.message_id}, {"output_index", 0}, {"content_index", 0}, {"part", part}});
  out += event("response.output_item.done",
               {{"output_index", 0},
                {"item", {{"type", "message"}, {"id", identity_.message_id}, {"role", "assistant"}, {"status", "completed"}, {"content", json::array({part})}}}});
  json done = response(length_stop_ ? "incomplete" : "completed", &usage);
  if (auto error = store_turn_(done)) {
    // Not stored: the turn cannot be continued, so it is not reported completed.
    done["status"] = "failed";
    done["error"] = {{"code", error->code}, {"message", error->message}};
    out += event("error", {{"code", error->code}, {"message", error->message}, {"param", nullptr}});
    out += event("response.failed", {{"response", done}});
  } else {
    out += event(length_stop_ ? "response.incomplete" : "response.completed", {{"response", done}});
  }
  return out;
}

bool ResponsesShaper::gather(const StreamEvent& e) {
  if (auto* d = std::get_if<TokenDelta>(&e)) {
    text_ += d->text;
    return false;
  }
  if (auto* f = std::get_if<ChoiceFinished>(&e)) {
    length_stop_ = f->reason == FinishReason::kLength;
    return false;
  }
  const json done = response(length_stop_ ? "incomplete" : "completed", &std::get<RequestDone>(e).usage);
  if (auto error = store_turn_(done)) {
    whole_ = {error->status, dump(error->to_json())};
  } else {
    whole_ = {200, dump(done)};
  }
  return true;
}

ReplyShaper::Whole ResponsesShaper::whole() { return whole_; }

}  // namespace mnemo::server

#include "server/responses_shaper.h"

#include "server/completion.h"
#include "server/sse_json.h"

namespace mnemo::server {
namespace {

using nlohmann::json;

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

json text_part(const std::string& text) {
  return {{"type", "output_text"}, {"text", text}, {"annotations", json::array()}};
}

json reasoning_part(const std::string& text) { return {{"type", "reasoning_text"}, {"text", text}}; }

json reasoning_item(const std::string& id, const std::string& text, const char* status) {
  json content = json::array();
  if (!text.empty()) content.push_back(reasoning_part(text));
  return {{"type", "reasoning"}, {"id", id}, {"summary", json::array()}, {"content", content}, {"status", status}};
}

ReasoningSplitter::Pieces split_reply(const ReasoningTags& tags, bool open, const std::string& text) {
  ReasoningSplitter splitter(tags, open);
  ReasoningSplitter::Pieces pieces = splitter.feed(text);
  const ReasoningSplitter::Pieces tail = splitter.finish();
  pieces.reasoning += tail.reasoning;
  pieces.content += tail.content;
  return pieces;
}

}  // namespace

ResponsesShaper::ResponsesShaper(ResponseIdentity identity, std::string resumed_text, bool report_tokens, StoreTurn store_turn)
    : identity_(std::move(identity)),
      report_tokens_(report_tokens),
      store_turn_(std::move(store_turn)),
      text_(std::move(resumed_text)) {
  if (identity_.reasoning) reasoning_tokens_.emplace(*identity_.reasoning, identity_.reasoning_open);
  if (identity_.reasoning && !identity_.reads_tool_calls) {
    // A resumed turn's text (as the model wrote it: the server passes the resumed tokens' text
    // when it splits reasoning) puts the splitter where the failed instance left it; the client
    // has its events (the router drops a resumed stream's repeated openings).
    splitter_.emplace(*identity_.reasoning, identity_.reasoning_open);
    const ReasoningSplitter::Pieces before = splitter_->feed(text_);
    reasoning_text_ = before.reasoning;
    message_text_ = before.content;
    reasoning_open_item_ = !reasoning_text_.empty() && message_text_.empty();
    message_opened_ = !message_text_.empty();
  }
}

json message_item(const std::string& id, const std::string& text, const char* status) {
  json content = json::array();
  if (!text.empty()) content.push_back(text_part(text));
  return {{"type", "message"}, {"id", id}, {"role", "assistant"}, {"status", status}, {"content", content}};
}

json function_call_item(const ToolCall& call, const char* status) {
  return {{"type", "function_call"}, {"id", "fc_" + call.id.substr(call.id.find('_') + 1)}, {"call_id", call.id},
          {"name", call.name}, {"arguments", call.arguments}, {"status", status}};
}

json ResponsesShaper::output_items() const {
  json output = json::array();
  ReasoningSplitter::Pieces split{"", text_};
  if (identity_.reasoning) split = split_reply(*identity_.reasoning, identity_.reasoning_open, text_);
  if (!split.reasoning.empty()) output.push_back(reasoning_item(identity_.reasoning_id, split.reasoning, "completed"));
  if (!identity_.reads_tool_calls) {
    output.push_back(message_item(identity_.message_id, split.content, "completed"));
    return output;
  }
  const ParsedReply reply = parse_reply(identity_.tool_format, identity_.tool_envelope, split.content);
  if (!reply.content.empty() || reply.calls.empty()) output.push_back(message_item(identity_.message_id, reply.content, "completed"));
  for (const ToolCall& call : reply.calls) output.push_back(function_call_item(call, "completed"));
  return output;
}

json ResponsesShaper::response(const std::string& status, const RequestUsage* usage) const {
  json output = status == "in_progress" ? json::array() : output_items();
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
            {"tools", identity_.tools},
            {"tool_choice", identity_.tool_choice},
            {"parallel_tool_calls", identity_.parallel_tool_calls},
            {"error", nullptr},
            {"usage", nullptr}};
  if (usage != nullptr) {
    r["usage"] = {{"input_tokens", usage->prompt_tokens},
                  {"input_tokens_details", cached_tokens_details(*usage)},
                  {"output_tokens", usage->completion_tokens},
                  {"output_tokens_details", {{"reasoning_tokens", reasoning_tokens_ ? reasoning_tokens_->count() : 0}}},
                  {"total_tokens", usage->prompt_tokens + usage->completion_tokens}};
  }
  return r;
}

std::string ResponsesShaper::event(const std::string& type, json payload) {
  payload["type"] = type;
  payload["sequence_number"] = sequence_++;
  return "event: " + type + "\ndata: " + sse_json(payload) + "\n\n";
}

std::string ResponsesShaper::open_stream() {
  const json initial = response("in_progress", nullptr);
  std::string out = event("response.created", {{"response", initial}});
  out += event("response.in_progress", {{"response", initial}});
  if (identity_.reads_tool_calls) return out;  // the items come once the reply is read
  if (splitter_) return out;                   // the items open as the reply shows what it is
  return out + open_message();
}

std::string ResponsesShaper::open_message() {
  message_opened_ = true;
  const int index = message_index();
  std::string out = event("response.output_item.added",
                          {{"output_index", index},
                           {"item", {{"type", "message"}, {"id", identity_.message_id}, {"role", "assistant"}, {"status", "in_progress"}, {"content", json::array()}}}});
  out += event("response.content_part.added",
               {{"item_id", identity_.message_id}, {"output_index", index}, {"content_index", 0}, {"part", text_part("")}});
  return out;
}

std::string ResponsesShaper::close_reasoning() {
  reasoning_open_item_ = false;
  const json where = {{"item_id", identity_.reasoning_id}, {"output_index", 0}, {"content_index", 0}};
  json text_done = where;
  text_done["text"] = reasoning_text_;
  std::string out = event("response.reasoning_text.done", std::move(text_done));
  json part_done = where;
  part_done["part"] = reasoning_part(reasoning_text_);
  out += event("response.content_part.done", std::move(part_done));
  out += event("response.output_item.done", {{"output_index", 0}, {"item", reasoning_item(identity_.reasoning_id, reasoning_text_, "completed")}});
  return out;
}

std::string ResponsesShaper::stream_pieces(const ReasoningSplitter::Pieces& pieces, int32_t token) {
  std::string out;
  bool token_reported = !report_tokens_ || token < 0;
  if (!pieces.reasoning.empty()) {
    if (!reasoning_open_item_ && reasoning_text_.empty()) {
      reasoning_open_item_ = true;
      out += event("response.output_item.added",
                   {{"output_index", 0}, {"item", reasoning_item(identity_.reasoning_id, "", "in_progress")}});
      out += event("response.content_part.added",
                   {{"item_id", identity_.reasoning_id}, {"output_index", 0}, {"content_index", 0}, {"part", reasoning_part("")}});
    }
    reasoning_text_ += pieces.reasoning;
    out += event("response.reasoning_text.delta",
                 {{"item_id", identity_.reasoning_id}, {"output_index", 0}, {"content_index", 0}, {"delta", pieces.reasoning}});
  }
  if (!pieces.content.empty()) {
    if (reasoning_open_item_) out += close_reasoning();
    if (!message_opened_) out += open_message();
    message_text_ += pieces.content;
  }
  // The answer's deltas; a token whose text is held back or went to the reasoning is reported
  // to a router in an empty one (which the router does not pass on).
  if (!pieces.content.empty() || !token_reported) {
    json delta = {{"item_id", identity_.message_id}, {"output_index", message_index()}, {"content_index", 0}, {"delta", pieces.content},
                  {"logprobs", json::array()}};
    if (report_tokens_ && token >= 0) delta["mnemo_token"] = token;
    if (report_tokens_) {
      if (const auto replicated = replica_progress_change()) delta["mnemo_replicated"] = *replicated;
    }
    out += event("response.output_text.delta", std::move(delta));
  }
  return out;
}

bool ResponsesShaper::stream(const StreamEvent& e, std::string& out) {
  if (auto* d = std::get_if<TokenDelta>(&e); d != nullptr && reasoning_tokens_ && d->token >= 0) reasoning_tokens_->feed(d->text);
  if (auto* d = std::get_if<TokenDelta>(&e); d != nullptr && identity_.reads_tool_calls) {
    text_ += d->text;
    return false;
  }
  if (auto* d = std::get_if<TokenDelta>(&e); d != nullptr && splitter_) {
    text_ += d->text;
    out += stream_pieces(splitter_->feed(d->text), d->token);
    return false;
  }
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

std::string ResponsesShaper::release_items() {
  std::string out;
  int output_index = 0;
  for (const json& item : output_items()) {
    json opened = item;
    opened["status"] = "in_progress";
    if (item["type"] == "function_call") {
      opened["arguments"] = "";
      out += event("response.output_item.added", {{"output_index", output_index}, {"item", opened}});
      const json where = {{"item_id", item["id"]}, {"output_index", output_index}};
      json delta = where;
      delta["delta"] = item["arguments"];
      out += event("response.function_call_arguments.delta", std::move(delta));
      json done = where;
      done["arguments"] = item["arguments"];
      out += event("response.function_call_arguments.done", std::move(done));
    } else if (item["type"] == "reasoning") {
      // Streamed as it came (the content is what is held back): it closes with the others.
      if (reasoning_open_item_) out += close_reasoning();
      ++output_index;
      continue;
    } else {
      const std::string text = item["content"].empty() ? std::string() : item["content"][0]["text"].get<std::string>();
      opened["content"] = json::array();
      out += event("response.output_item.added", {{"output_index", output_index}, {"item", opened}});
      const json where = {{"item_id", item["id"]}, {"output_index", output_index}, {"content_index", 0}};
      json added = where;
      added["part"] = text_part("");
      out += event("response.content_part.added", std::move(added));
      json delta = where;
      delta["delta"] = text;
      delta["logprobs"] = json::array();
      out += event("response.output_text.delta", std::move(delta));
      json text_done = where;
      text_done["text"] = text;
      out += event("response.output_text.done", std::move(text_done));
      json part_done = where;
      part_done["part"] = text_part(text);
      out += event("response.content_part.done", std::move(part_done));
    }
    out += event("response.output_item.done", {{"output_index", output_index}, {"item", item}});
    ++output_index;
  }
  return out;
}

std::string ResponsesShaper::end_of_stream(const RequestUsage& usage) {
  if (identity_.reads_tool_calls) return release_items() + end_events(usage);
  std::string out;
  std::string answer = text_;
  if (splitter_) {
    out += stream_pieces(splitter_->finish(), -1);
    if (reasoning_open_item_) out += close_reasoning();
    if (!message_opened_) out += open_message();
    answer = message_text_;
  }
  const int index = message_index();
  const json part = text_part(answer);
  out += event("response.output_text.done",
               {{"item_id", identity_.message_id}, {"output_index", index}, {"content_index", 0}, {"text", answer}});
  out += event("response.content_part.done", {{"item_id", identity_.message_id}, {"output_index", index}, {"content_index", 0}, {"part", part}});
  out += event("response.output_item.done",
               {{"output_index", index},
                {"item", {{"type", "message"}, {"id", identity_.message_id}, {"role", "assistant"}, {"status", "completed"}, {"content", json::array({part})}}}});
  return out + end_events(usage);
}

std::string ResponsesShaper::end_events(const RequestUsage& usage) {
  std::string out;
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
    if (reasoning_tokens_ && d->token >= 0) reasoning_tokens_->feed(d->text);
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

#include "server/completion.h"

#include <chrono>
#include <random>

#include <fmt/format.h>

#include "server/sse_json.h"
#include "server/tool_request.h"

namespace mnemo::server {
namespace {

using nlohmann::json;

std::string random_id(const char* prefix) {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  return fmt::format("{}-{:016x}{:08x}", prefix, rng(), static_cast<uint32_t>(rng()));
}

std::string sse(const json& payload) { return "data: " + sse_json(payload) + "\n\n"; }

json token_bytes(const std::string& piece) {
  json bytes = json::array();
  for (unsigned char c : piece) bytes.push_back(static_cast<int>(c));
  return bytes;
}

}  // namespace

Completion::Completion(Endpoint endpoint, std::string model_id, ParsedRequest request, const Tokenizer& tokenizer)
    : endpoint_(endpoint),
      model_id_(std::move(model_id)),
      id_(random_id(endpoint == Endpoint::kChat ? "chatcmpl" : "cmpl")),
      created_(std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count()),
      request_(std::move(request)),
      tokenizer_(tokenizer),
      texts_(static_cast<size_t>(request_.generation.n)),
      reasons_(static_cast<size_t>(request_.generation.n), "stop"),
      logprobs_(static_cast<size_t>(request_.generation.n), json::array()) {
  // echo: the prompt as text (a prompt of token ids, decoded). A resumed stream's client has it.
  if (request_.echo && request_.generation.resume_tokens.empty()) {
    echo_ = request_.prompt_tokens.empty() ? request_.prompt_text : tokenizer_.decode(request_.prompt_tokens);
  }
  // A resumed reply that is read for tool calls was held back whole: its client has none of it,
  // so it starts with what the failed instance generated.
  if (reads_tool_calls() && !request_.generation.resume_tokens.empty()) {
    texts_[0] = streamed_text(tokenizer_, request_.generation.stop, request_.generation.resume_tokens);
  }
}

json cached_tokens_details(const RequestUsage& usage) {
  json details = {{"cached_tokens", usage.cached_tokens},
                  {"cached_tokens_device", usage.device_cached_tokens},
                  {"cached_tokens_host", usage.host_cached_tokens},
                  {"cached_tokens_disk", usage.disk_cached_tokens},
                  {"recomputed_tokens", usage.recomputed_tokens}};
  if (usage.resumed_tokens > 0) {
    details["resumed_tokens"] = usage.resumed_tokens;
    details["resumed_cached_tokens"] = usage.resumed_cached_tokens;
  }
  return details;
}

json Completion::usage_json() const {
  return {{"prompt_tokens", usage_.prompt_tokens},
          {"completion_tokens", usage_.completion_tokens},
          {"total_tokens", usage_.prompt_tokens + usage_.completion_tokens},
          {"prompt_tokens_details", cached_tokens_details(usage_)}};
}

json Completion::logprobs_json(const TokenDelta& delta) const {
  const Logprobs& lp = *delta.logprobs;
  const std::string piece = tokenizer_.token_to_piece(lp.chosen.token, true);
  if (endpoint_ == Endpoint::kChat) {
    json top = json::array();
    for (const TokenLogprob& alt : lp.top) {
      const std::string alt_piece = tokenizer_.token_to_piece(alt.token, true);
      top.push_back({{"token", alt_piece}, {"logprob", alt.logprob}, {"bytes", token_bytes(alt_piece)}});
    }
    return {{"token", piece}, {"logprob", lp.chosen.logprob}, {"bytes", token_bytes(piece)}, {"top_logprobs", top}};
  }
  json top = json::object();
  for (const TokenLogprob& alt : lp.top) top[tokenizer_.token_to_piece(alt.token, true)] = alt.logprob;
  return {{"token", piece}, {"logprob", lp.chosen.logprob}, {"top", top}};
}

json Completion::chunk(json choices) const {
  return {{"id", id_},
          {"object", endpoint_ == Endpoint::kChat ? "chat.completion.chunk" : "text_completion"},
          {"created", created_},
          {"model", model_id_},
          {"choices", std::move(choices)}};
}

bool Completion::gather(const StreamEvent& event) {
  if (auto* delta = std::get_if<TokenDelta>(&event)) {
    texts_.at(static_cast<size_t>(delta->choice)) += delta->text;
    if (delta->logprobs) logprobs_.at(static_cast<size_t>(delta->choice)).push_back(logprobs_json(*delta));
  } else if (auto* finished = std::get_if<ChoiceFinished>(&event)) {
    reasons_.at(static_cast<size_t>(finished->choice)) = finish_reason_name(finished->reason);
  } else if (auto* done = std::get_if<RequestDone>(&event)) {
    usage_ = done->usage;
    error_ = done->error;
    return true;
  }
  return false;
}

ReplyShaper::Whole Completion::whole() {
  return {200, whole_response().dump(-1, ' ', false, json::error_handler_t::replace)};
}

json Completion::whole_response() const {
  const int32_t n = request_.generation.n;
  json choices = json::array();
  for (int32_t i = 0; i < n; ++i) {
    const auto idx = static_cast<size_t>(i);
    json choice = {{"index", i}, {"finish_reason", reasons_[idx]}};
    json lp = nullptr;
    if (request_.logprobs) {
      if (endpoint_ == Endpoint::kChat) {
        lp = {{"content", logprobs_[idx]}};
      } else {
        lp = {{"tokens", json::array()}, {"token_logprobs", json::array()}, {"top_logprobs", json::array()}};
        for (const json& entry : logprobs_[idx]) {
          lp["tokens"].push_back(entry["token"]);
          lp["token_logprobs"].push_back(entry["logprob"]);
          lp["top_logprobs"].push_back(entry["top"]);
        }
      }
    }
    choice["logprobs"] = lp;
    if (reads_tool_calls()) {
      const ParsedReply reply = parse_reply(request_.tool_format, request_.tool_envelope, texts_[idx]);
      choice["message"] = {{"role", "assistant"}, {"content", reply.content}, {"refusal", nullptr}};
      if (!reply.calls.empty()) {
        if (reply.content.empty()) choice["message"]["content"] = nullptr;
        choice["message"]["tool_calls"] = tool_calls_json(reply.calls);
        if (reasons_[idx] == "stop") choice["finish_reason"] = "tool_calls";
      }
    } else if (endpoint_ == Endpoint::kChat) {
      choice["message"] = {{"role", "assistant"}, {"content", texts_[idx]}, {"refusal", nullptr}};
    } else {
      choice["text"] = echo_ + texts_[idx];
    }
    choices.push_back(std::move(choice));
  }
  json response = {{"id", id_},
                   {"object", endpoint_ == Endpoint::kChat ? "chat.completion" : "text_completion"},
                   {"created", created_},
                   {"model", model_id_},
                   {"choices", std::move(choices)},
                   {"usage", usage_json()}};
  if (!error_.empty()) response["error"] = {{"message", error_}, {"type", "server_error"}};
  return response;
}

std::string Completion::open_stream() {
  json choices = json::array();
  if (endpoint_ != Endpoint::kChat) {
    if (echo_.empty()) return "";
    for (int32_t i = 0; i < request_.generation.n; ++i) {
      choices.push_back({{"index", i}, {"text", echo_}, {"logprobs", nullptr}, {"finish_reason", nullptr}});
    }
    return sse(chunk(std::move(choices)));
  }
  for (int32_t i = 0; i < request_.generation.n; ++i) {
    choices.push_back({{"index", i}, {"delta", {{"role", "assistant"}, {"content", ""}}}, {"logprobs", nullptr}, {"finish_reason", nullptr}});
  }
  return sse(chunk(std::move(choices)));
}

std::string Completion::release_choice(int32_t index) {
  const ParsedReply reply = parse_reply(request_.tool_format, request_.tool_envelope, texts_.at(static_cast<size_t>(index)));
  std::string out;
  const auto delta_chunk = [&](json delta) {
    out += sse(chunk(json::array({{{"index", index}, {"delta", std::move(delta)}, {"logprobs", nullptr}, {"finish_reason", nullptr}}})));
  };
  if (!reply.content.empty()) delta_chunk({{"content", reply.content}});
  for (size_t i = 0; i < reply.calls.size(); ++i) {
    const ToolCall& call = reply.calls[i];
    delta_chunk({{"tool_calls", json::array({{{"index", i}, {"id", call.id}, {"type", "function"},
                                              {"function", {{"name", call.name}, {"arguments", ""}}}}})}});
    delta_chunk({{"tool_calls", json::array({{{"index", i}, {"function", {{"arguments", call.arguments}}}}})}});
  }
  if (!reply.calls.empty() && reasons_.at(static_cast<size_t>(index)) == "stop") reasons_[static_cast<size_t>(index)] = "tool_calls";
  return out;
}

bool Completion::stream(const StreamEvent& event, std::string& out) {
  if (auto* delta = std::get_if<TokenDelta>(&event); delta != nullptr && reads_tool_calls()) {
    texts_.at(static_cast<size_t>(delta->choice)) += delta->text;
    if (!request_.report_tokens || delta->token < 0) return false;
    // A router following the tokens still gets each one (with no text: the reply is held back).
    json choice = {{"index", delta->choice}, {"delta", json::object()}, {"logprobs", nullptr}, {"finish_reason", nullptr},
                   {"mnemo_token", delta->token}};
    if (const auto replicated = replica_progress_change()) choice["mnemo_replicated"] = *replicated;
    out += sse(chunk(json::array({choice})));
    return false;
  }
  if (auto* delta = std::get_if<TokenDelta>(&event)) {
    // A token whose text is held back: the engine reports it for a replica, the client asked
    // for nothing.
    if (delta->text.empty() && !delta->logprobs && !request_.report_tokens) return false;
    json lp = nullptr;
    if (delta->logprobs) {
      json entry = logprobs_json(*delta);
      if (endpoint_ == Endpoint::kChat) {
        lp = {{"content", json::array({entry})}};
      } else {
        lp = {{"tokens", {entry["token"]}}, {"token_logprobs", {entry["logprob"]}}, {"top_logprobs", {entry["top"]}}};
      }
    }
    json choice = {{"index", delta->choice}, {"logprobs", lp}, {"finish_reason", nullptr}};
    if (endpoint_ == Endpoint::kChat) {
      choice["delta"] = {{"content", delta->text}};
    } else {
      choice["text"] = delta->text;
    }
    if (request_.report_tokens && delta->token >= 0) choice["mnemo_token"] = delta->token;
    if (request_.report_tokens) {
      if (const auto replicated = replica_progress_change()) choice["mnemo_replicated"] = *replicated;
    }
    out += sse(chunk(json::array({choice})));
    return false;
  }
  if (auto* finished = std::get_if<ChoiceFinished>(&event)) {
    reasons_.at(static_cast<size_t>(finished->choice)) = finish_reason_name(finished->reason);
    if (reads_tool_calls()) out += release_choice(finished->choice);
    json choice = {{"index", finished->choice}, {"logprobs", nullptr}, {"finish_reason", reasons_[static_cast<size_t>(finished->choice)]}};
    if (endpoint_ == Endpoint::kChat) {
      choice["delta"] = json::object();
    } else {
      choice["text"] = "";
    }
    out += sse(chunk(json::array({choice})));
    return false;
  }
  const auto& end = std::get<RequestDone>(event);
  usage_ = end.usage;
  if (!end.error.empty()) out += sse({{"error", {{"message", end.error}, {"type", "server_error"}}}});
  if (request_.include_usage) {
    json last = chunk(json::array());
    last["usage"] = usage_json();
    out += sse(last);
  }
  out += "data: [DONE]\n\n";
  return true;
}

}  // namespace mnemo::server

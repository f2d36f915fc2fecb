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

// A whole reply's reasoning and content.
ReasoningSplitter::Pieces split_reply(const ReasoningTags& tags, bool open, const std::string& text) {
  ReasoningSplitter splitter(tags, open);
  ReasoningSplitter::Pieces pieces = splitter.feed(text);
  const ReasoningSplitter::Pieces tail = splitter.finish();
  pieces.reasoning += tail.reasoning;
  pieces.content += tail.content;
  return pieces;
}

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
  if (splits_reasoning()) {
    splitters_.assign(texts_.size(), ReasoningSplitter(*request_.reasoning, request_.reasoning_open));
    contents_.assign(texts_.size(), "");
    reasoning_tokens_.assign(texts_.size(), ReasoningTokenCounter(*request_.reasoning, request_.reasoning_open));
    // A resumed stream's client has the reasoning the failed instance streamed: the splitter
    // takes that text in to be where it was, and only a held-back content is kept.
    if (!request_.generation.resume_tokens.empty()) {
      const std::string before = reads_tool_calls() ? texts_[0]
                                                    : streamed_text(tokenizer_, request_.generation.stop, request_.generation.resume_tokens);
      contents_[0] = splitters_[0].feed(before).content;
    }
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
  json usage = {{"prompt_tokens", usage_.prompt_tokens},
                {"completion_tokens", usage_.completion_tokens},
                {"total_tokens", usage_.prompt_tokens + usage_.completion_tokens},
                {"prompt_tokens_details", cached_tokens_details(usage_)}};
  if (splits_reasoning()) {
    int32_t reasoning = 0;
    for (const ReasoningTokenCounter& counter : reasoning_tokens_) reasoning += counter.count();
    usage["completion_tokens_details"] = {{"reasoning_tokens", reasoning}};
  }
  return usage;
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
    if (splits_reasoning() && delta->token >= 0) reasoning_tokens_.at(static_cast<size_t>(delta->choice)).feed(delta->text);
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
    ReasoningSplitter::Pieces split{"", texts_[idx]};
    if (splits_reasoning()) split = split_reply(*request_.reasoning, request_.reasoning_open, texts_[idx]);
    if (reads_tool_calls()) {
      const ParsedReply reply = parse_reply(request_.tool_format, request_.tool_envelope, split.content);
      choice["message"] = {{"role", "assistant"}, {"content", reply.content}, {"refusal", nullptr}};
      if (!reply.calls.empty()) {
        if (reply.content.empty()) choice["message"]["content"] = nullptr;
        choice["message"]["tool_calls"] = tool_calls_json(reply.calls);
        if (reasons_[idx] == "stop") choice["finish_reason"] = "tool_calls";
      }
    } else if (endpoint_ == Endpoint::kChat) {
      choice["message"] = {{"role", "assistant"}, {"content", split.content}, {"refusal", nullptr}};
    } else {
      choice["text"] = echo_ + texts_[idx];
    }
    if (!split.reasoning.empty()) choice["message"]["reasoning_content"] = split.reasoning;
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

std::string Completion::delta_chunk(int32_t choice, const ReasoningSplitter::Pieces& pieces, const json& logprobs) const {
  json delta = json::object();
  if (!pieces.reasoning.empty()) delta["reasoning_content"] = pieces.reasoning;
  if (!pieces.content.empty() || delta.empty()) delta["content"] = pieces.content;
  return sse(chunk(json::array({{{"index", choice}, {"delta", std::move(delta)}, {"logprobs", logprobs}, {"finish_reason", nullptr}}})));
}

std::string Completion::release_choice(int32_t index) {
  std::string out;
  std::string content = texts_.at(static_cast<size_t>(index));
  if (splits_reasoning()) {
    const ReasoningSplitter::Pieces tail = splitters_.at(static_cast<size_t>(index)).finish();
    if (!tail.reasoning.empty()) out += delta_chunk(index, {tail.reasoning, ""}, nullptr);
    content = contents_[static_cast<size_t>(index)] + tail.content;
  }
  const ParsedReply reply = parse_reply(request_.tool_format, request_.tool_envelope, content);
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
  if (auto* delta = std::get_if<TokenDelta>(&event); delta != nullptr && splits_reasoning() && delta->token >= 0) {
    reasoning_tokens_.at(static_cast<size_t>(delta->choice)).feed(delta->text);
  }
  if (auto* delta = std::get_if<TokenDelta>(&event); delta != nullptr && reads_tool_calls()) {
    texts_.at(static_cast<size_t>(delta->choice)) += delta->text;
    if (splits_reasoning()) {
      // The reasoning streams as it comes; the content is held back to be read for calls.
      const ReasoningSplitter::Pieces pieces = splitters_.at(static_cast<size_t>(delta->choice)).feed(delta->text);
      contents_[static_cast<size_t>(delta->choice)] += pieces.content;
      if (!pieces.reasoning.empty()) out += delta_chunk(delta->choice, {pieces.reasoning, ""}, nullptr);
    }
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
    if (splits_reasoning()) {
      const ReasoningSplitter::Pieces pieces = splitters_.at(static_cast<size_t>(delta->choice)).feed(delta->text);
      if (pieces.reasoning.empty() && pieces.content.empty() && !delta->logprobs && !request_.report_tokens) return false;
      choice["delta"] = json::object();
      if (!pieces.reasoning.empty()) choice["delta"]["reasoning_content"] = pieces.reasoning;
      if (!pieces.content.empty() || pieces.reasoning.empty()) choice["delta"]["content"] = pieces.content;
    } else if (endpoint_ == Endpoint::kChat) {
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
    if (reads_tool_calls()) {
      out += release_choice(finished->choice);
    } else if (splits_reasoning()) {
      const ReasoningSplitter::Pieces tail = splitters_.at(static_cast<size_t>(finished->choice)).finish();
      if (!tail.reasoning.empty() || !tail.content.empty()) out += delta_chunk(finished->choice, tail, nullptr);
    }
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

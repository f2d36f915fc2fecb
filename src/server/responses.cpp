// The Responses API (SPEC P1 as a protocol): POST /v1/responses with `previous_response_id`
// continues a stored conversation, so a client sends only its new message; the server rebuilds
// the history from the durable store, and the prefix cache finds the previous turns' KV.
// GET and DELETE /v1/responses/{id}. Streaming follows OpenAI's event sequence.
#include <algorithm>
#include <chrono>
#include <optional>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "auth/crypto.h"
#include "server/engine_body.h"
#include "server/input_items.h"
#include "server/internal_requests.h"
#include "server/responses_request.h"
#include "server/prompt.h"
#include "server/responses_shaper.h"
#include "server/server.h"

namespace mnemo::server {
namespace {

using nlohmann::json;

// Turns followed back through previous_response_id: more than any context holds (a turn takes a
// few template tokens at least), few enough that one request cannot make the server walk the
// store for long.
constexpr size_t kMaxChain = 4096;

// 128 bits from the CSPRNG: an id cannot be guessed (ids are still scoped to their tenant).
std::string new_id(const char* prefix) { return fmt::format("{}_{}", prefix, auth::random_hex(16)); }

ApiError store_failure(const Error& error) {
  return ApiError{503, "the response store failed: " + error.message(), "server_error", "", "store_unavailable"};
}

ApiError no_space() {
  return ApiError{507, "the response could not be stored: the server's disk is full", "server_error", "", "insufficient_storage"};
}

// Why a stored turn was not stored (nullopt: it was). `param`: the request field naming the id.
std::optional<ApiError> insert_failure(const Result<ResponseStore::Inserted>& inserted, const std::string& id,
                                       const char* param) {
  if (!inserted.ok()) return store_failure(inserted.error());
  if (*inserted == ResponseStore::Inserted::kNoSpace) return no_space();
  if (*inserted == ResponseStore::Inserted::kExists) {
    return ApiError{409, "Response '" + id + "' exists already; a stored response is never replaced.",
                    "invalid_request_error", param, "response_exists"};
  }
  return std::nullopt;
}

ApiError not_found(const std::string& id, const char* param) {
  return ApiError{404, "Response with id '" + id + "' not found.", "invalid_request_error", param, ""};
}

// The tenant's stored turns ending with `id`, oldest first; an ApiError if one is missing or
// another tenant's (404, naming it), unreadable (503), or the chain is too long or loops (400).
std::variant<std::vector<StoredResponse>, ApiError> load_chain(ResponseStore& store, const std::string& id,
                                                                const std::string& tenant) {
  std::vector<StoredResponse> chain;
  std::unordered_set<std::string> visited;
  for (std::string at = id; !at.empty();) {
    if (chain.size() >= kMaxChain) {
      return bad_request(fmt::format("the conversation is longer than {} turns", kMaxChain), "previous_response_id");
    }
    if (!visited.insert(at).second) return bad_request("the conversation's turns form a cycle", "previous_response_id");
    auto record = store.get(at, tenant);
    if (!record.ok()) return store_failure(record.error());
    if (!record->has_value()) return not_found(at, "previous_response_id");
    at = (*record)->previous_id;
    chain.push_back(std::move(**record));
  }
  std::reverse(chain.begin(), chain.end());
  return chain;
}

// A turn's messages as the store keeps them, as items (instructions are per turn: not stored).
json stored_inputs(const std::vector<ChatMessage>& turn) {
  std::vector<ChatMessage> kept;
  for (const ChatMessage& m : turn) {
    if (m.role != "system") kept.push_back(m);
  }
  return items_of(kept);
}

// The conversation of a chain of turns: each turn's inputs, then its output (its text and calls;
// instructions are per turn: not part of the history). Items the store holds were read once
// already; one that no longer reads is left out.
std::vector<ChatMessage> history_of(const std::vector<StoredResponse>& chain) {
  std::vector<ChatMessage> messages;
  for (const StoredResponse& turn : chain) {
    std::string error;
    (void)append_items(turn.input_messages, messages, error);
    const size_t before = messages.size();
    (void)append_items(turn.response.value("output", json::array()), messages, error);
    if (messages.size() == before) messages.emplace_back("assistant", "");  // an empty reply is a turn all the same
  }
  return messages;
}

}  // namespace

std::variant<Server::ResponsesTurn, ApiError> Server::read_responses_turn(const json& body, const Caller& caller) const {
  if (!body.is_object()) return bad_request("the request body must be a JSON object");
  if (auto refused = refuse_internal_fields(body, caller)) return *refused;
  std::vector<std::string> ids;
  for (const ServedModel& model : models_) ids.push_back(model.id);
  auto parsed = parse_responses_request(body, ids);
  if (auto* error = std::get_if<ApiError>(&parsed)) return *error;
  ResponsesTurn t = std::move(std::get<ResponsesRequest>(parsed));
  if ((t.store || !t.previous_id.empty()) && store_ == nullptr) {
    if (!store_problem_.empty()) return store_out_of_service();
    if (t.store) return bad_request("this server has no response store", "store");
    return not_found(t.previous_id, "previous_response_id");
  }
  // The history, oldest first: each stored turn's inputs, then its output (instructions are not
  // inherited).
  std::vector<ChatMessage> history;
  if (!t.previous_id.empty()) {
    auto chain = load_chain(*store_, t.previous_id, caller.tenant);
    if (auto* error = std::get_if<ApiError>(&chain)) return *error;
    history = history_of(std::get<std::vector<StoredResponse>>(chain));
  }
  std::vector<ChatMessage> all;
  if (t.instructions) all.push_back({"system", *t.instructions});
  for (ChatMessage& m : history) all.push_back(std::move(m));
  for (const ChatMessage& m : t.turn) all.push_back(m);
  t.request.messages = std::move(all);
  return t;
}

void Server::handle_responses_prompt(const http::Request& req, http::Response& res) {
  auto caller = peer_of(req);
  if (auto* error = std::get_if<ApiError>(&caller)) return send_error(res, *error);
  auto body = parse_request_body(req.body);
  if (auto* error = std::get_if<ApiError>(&body)) return send_error(res, *error);
  auto read = read_responses_turn(std::get<json>(body), std::get<Caller>(caller));
  if (auto* error = std::get_if<ApiError>(&read)) return send_error(res, *error);
  const ResponsesTurn& t = std::get<ResponsesTurn>(read);
  auto tokens = prompt_of(t.request, Endpoint::kChat);
  if (auto* error = std::get_if<ApiError>(&tokens)) return send_error(res, *error);
  res.set_content(json{{"prompt", std::get<std::vector<TokenId>>(tokens)}}.dump(), "application/json");
}

void Server::handle_responses_import(const http::Request& req, http::Response& res) {
  auto caller_or_error = peer_of(req);
  if (auto* error = std::get_if<ApiError>(&caller_or_error)) return send_error(res, *error);
  const Caller& caller = std::get<Caller>(caller_or_error);
  auto parsed = parse_request_body(req.body);
  if (auto* error = std::get_if<ApiError>(&parsed)) return send_error(res, *error);
  auto import_or_error = parse_import_body(std::get<json>(parsed));
  if (auto* error = std::get_if<ApiError>(&import_or_error)) return send_error(res, *error);
  const ImportBody& import = std::get<ImportBody>(import_or_error);
  auto store = store_or_error("");
  if (auto* error = std::get_if<ApiError>(&store)) return send_error(res, *error);
  // The turn's inputs and the history it continues, which must be here already, the tenant's: a
  // copy of a turn whose earlier turns this instance lacks could not be continued.
  const json& request = import.request;
  auto read = read_responses_turn(request, caller);
  if (auto* error = std::get_if<ApiError>(&read)) return send_error(res, *error);
  const ResponsesTurn& t = std::get<ResponsesTurn>(read);
  const std::string& id = import.id;
  auto inserted = std::get<ResponseStore*>(store)->insert(
      {id, caller.tenant, t.previous_id, stored_inputs(t.turn), import.response, cache_namespace_of(caller, t.request)});
  if (auto error = insert_failure(inserted, id, "response")) return send_error(res, *error);
  res.set_content(json{{"stored", id}}.dump(), "application/json");
}

void Server::handle_create_response(const http::Request& req, http::Response& res) {
  auto caller_or_error = caller_of(req);
  if (auto* error = std::get_if<ApiError>(&caller_or_error)) return send_error(res, *error);
  const Caller caller = std::get<Caller>(caller_or_error);
  auto parsed = parse_request_body(req.body);
  if (auto* error = std::get_if<ApiError>(&parsed)) return send_error(res, *error);
  json body = std::move(std::get<json>(parsed));
  auto read = read_responses_turn(body, caller);
  if (auto* error = std::get_if<ApiError>(&read)) return send_error(res, *error);
  ResponsesTurn& t = std::get<ResponsesTurn>(read);
  ParsedRequest& request = t.request;

  // A resumed turn answers as the response its client was getting; a stored one must not replace
  // a turn kept here.
  const ResumedResponse& resumed = t.resumed;
  if (!resumed.id.empty() && store_ != nullptr) {
    auto existing = store_->get(resumed.id, caller.tenant);
    if (!existing.ok()) return send_error(res, store_failure(existing.error()));
    if (existing->has_value()) {
      return send_error(res, ApiError{409, "Response '" + resumed.id + "' exists already: it cannot be resumed here.",
                                      "invalid_request_error", "mnemo_resume_response", ""});
    }
  }

  auto prepared = prepare(caller, request, Endpoint::kChat);
  if (auto* error = std::get_if<ApiError>(&prepared)) return send_error(res, *error);
  auto run = std::move(std::get<PreparedRun>(prepared));

  ResponseIdentity identity;
  identity.id = resumed.id.empty() ? new_id("resp") : resumed.id;
  identity.message_id = resumed.message_id.empty() ? new_id("msg") : resumed.message_id;
  identity.created_at = resumed.created_at >= 0
                            ? resumed.created_at
                            : std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  identity.model = served(request.model).id;
  identity.previous_id = t.previous_id;
  identity.instructions = body.contains("instructions") ? body["instructions"] : json(nullptr);
  identity.max_output_tokens = request.generation.max_tokens;
  identity.temperature = request.generation.sampling.temperature;
  identity.top_p = request.generation.sampling.top_p;
  identity.store = t.store;
  identity.reads_tool_calls = request.tool_use.calls_possible();
  identity.tool_format = request.tool_format;
  identity.tool_envelope = request.tool_envelope;
  if (body.contains("tools") && body["tools"].is_array()) identity.tools = body["tools"];
  if (body.contains("tool_choice") && !body["tool_choice"].is_null()) identity.tool_choice = body["tool_choice"];
  identity.parallel_tool_calls = request.tool_use.parallel;
  identity.reasoning = request.reasoning;
  identity.reasoning_open = request.reasoning_open;
  identity.reasoning_id = new_id("rs");
  // Stores the finished turn: the client is told it is done only once it is stored (an error
  // it gets instead says why it is not).
  auto store_turn = [this, id = identity.id, store = t.store, tenant = caller.tenant, previous_id = t.previous_id,
                     inputs = stored_inputs(t.turn), ns = request.generation.cache_namespace](const json& response)
      -> std::optional<ApiError> {
    if (!store) return std::nullopt;
    std::optional<ApiError> error = insert_failure(store_->insert({id, tenant, previous_id, inputs, response, ns}), id, "");
    if (error) std::fprintf(stderr, "mnemo: response %s not stored: %s\n", id.c_str(), error->message.c_str());
    return error;
  };
  // A reply read for tool calls is held back whole: what the failed instance generated is its
  // start, though its client saw none of it.
  const std::vector<TokenId>& resume_tokens = request.generation.resume_tokens;
  // So does one whose reasoning is split off: the shaper needs the text as the model wrote it.
  const bool raw_resumed = identity.reads_tool_calls || identity.reasoning.has_value();
  std::string resumed_text = raw_resumed && !resume_tokens.empty()
                                 ? streamed_text(*served(request.model).tokenizer, request.generation.stop, resume_tokens)
                                 : resumed.text;
  auto shaper = std::make_shared<ResponsesShaper>(std::move(identity), std::move(resumed_text), request.report_tokens,
                                                  std::move(store_turn));
  // A router's Caching-3 copy back to a prefill instance (SPEC M4), or a failover copy, follows it.
  EventObserver observe = follow_run(req, run, *shaper);
  answer_with(res, run.stream, run.in_flight_guard, std::move(shaper), t.stream, std::move(observe));
}

std::vector<TokenId> Server::conversation_tokens(const ServedModel& model, const json& last_response,
                                                const std::vector<ChatMessage>& history) const {
  std::vector<ChatMessage> all;
  if (last_response.contains("instructions") && last_response["instructions"].is_string()) {
    all.push_back({"system", last_response["instructions"].get<std::string>()});
  }
  all.insert(all.end(), history.begin(), history.end());
  auto tokens = server::render_chat(*model.tokenizer, model.chat_template, all, /*add_generation_prompt=*/false);  // the reply last
  return tokens.ok() ? std::move(*tokens) : std::vector<TokenId>();
}

void Server::handle_get_response(const http::Request& req, http::Response& res) {
  auto caller = caller_of(req);
  if (auto* error = std::get_if<ApiError>(&caller)) return send_error(res, *error);
  constexpr std::string_view kItems = "/input_items";
  const bool items = req.path_tail.ends_with(kItems);
  const std::string id = items ? req.path_tail.substr(0, req.path_tail.size() - kItems.size()) : req.path_tail;
  if (id.find('/') != std::string::npos) return send_error(res, ApiError{404, "no route for GET " + req.path, "invalid_request_error", "", ""});
  if (store_ == nullptr && !store_problem_.empty()) return send_error(res, store_out_of_service());
  if (store_ == nullptr) return send_error(res, not_found(id, "response_id"));
  auto record = store_->get(id, std::get<Caller>(caller).tenant);
  if (!record.ok()) return send_error(res, store_failure(record.error()));
  if (!record->has_value()) return send_error(res, not_found(id, "response_id"));
  if (!items) {
    res.set_content((*record)->response.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
    return;
  }
  auto listed = input_items_page(id, (*record)->input_messages, req);
  if (auto* error = std::get_if<ApiError>(&listed)) return send_error(res, *error);
  res.set_content(std::get<json>(listed).dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

void Server::handle_delete_response(const http::Request& req, http::Response& res) {
  auto caller = caller_of(req);
  if (auto* error = std::get_if<ApiError>(&caller)) return send_error(res, *error);
  const std::string& tenant = std::get<Caller>(caller).tenant;
  const std::string id = req.path_tail;
  if (store_ == nullptr && !store_problem_.empty()) return send_error(res, store_out_of_service());
  if (store_ == nullptr) return send_error(res, not_found(id, "response_id"));
  // The conversation's tokens, to delete its KV too; an earlier turn still stored keeps its own.
  std::vector<TokenId> tokens;
  int32_t keep_tokens = 0;
  uint64_t cache_namespace = 0;
  const ServedModel* model = &models_[0];
  if (auto chain = load_chain(*store_, id, tenant); std::holds_alternative<std::vector<StoredResponse>>(chain)) {
    auto& turns = std::get<std::vector<StoredResponse>>(chain);
    cache_namespace = turns.back().cache_namespace;
    model = &served(turns.back().response.value("model", ""));
    tokens = conversation_tokens(*model, turns.back().response, history_of(turns));
    if (turns.size() > 1) {
      turns.pop_back();
      keep_tokens = static_cast<int32_t>(conversation_tokens(*model, turns.back().response, history_of(turns)).size());
    }
  }
  auto removed = store_->remove(id, tenant);
  if (!removed.ok()) return send_error(res, store_failure(removed.error()));
  if (!*removed) return send_error(res, not_found(id, "response_id"));
  if (!tokens.empty()) model->engine->forget_prefix(cache_namespace, std::move(tokens), keep_tokens);
  res.set_content(json{{"id", id}, {"object", "response"}, {"deleted", true}}.dump(), "application/json");
}

}  // namespace mnemo::server

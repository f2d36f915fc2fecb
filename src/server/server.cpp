#include "server/server.h"

#include <algorithm>
#include <chrono>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "server/completion.h"
#include "server/engine_body.h"
#include "server/metrics_text.h"
#include "server/prompt.h"
#include "util/random_seed.h"

namespace mnemo::server {

using nlohmann::json;

namespace {

http::ServerOptions http_options(const ServerConfig& config) {
  http::ServerOptions options;
  options.host = config.host;
  options.port = config.port;
  options.limits.max_body_bytes = config.max_body_bytes;
  options.limits.max_header_count = config.max_header_count;
  options.limits.max_connections = config.max_connections;
  options.tls = config.tls;
  if (!config.ui_dir.empty() && std::filesystem::is_directory(config.ui_dir)) options.static_dir = config.ui_dir;
  return options;
}

}  // namespace

Server::Server(Engine& engine, const Tokenizer& tokenizer, ChatTemplate chat_template, ServerConfig config)
    : Server(std::vector<ServedModel>{{config.model_id, &engine, &tokenizer, std::move(chat_template), config.sampling}},
             std::move(config)) {}

Server::Server(std::vector<ServedModel> models, ServerConfig config)
    : models_(std::move(models)),
      engine_(*models_.at(0).engine),
      config_(std::move(config)),
      http_(std::make_unique<http::Server>(http_options(config_))),
      auth_(config_.auth) {
  install_routes();
}

Server::~Server() = default;

Status Server::bind() {
  if (!config_.response_store.empty()) {
    auto opened = ResponseStore::open(config_.response_store);
    if (opened.ok()) {
      store_ = std::move(*opened);
    } else {
      // The rest of the server does not depend on the store: serve without it, and say why.
      store_problem_ = opened.error().message();
      std::fprintf(stderr, "mnemo: the Responses API is out of service: %s\n", store_problem_.c_str());
    }
  }
  if (Status bound = http_->bind(); !bound.ok()) return bound;
  bound_port_ = http_->port();
  return ok_status();
}

void Server::serve() { http_->serve(); }

void Server::stop() { http_->stop(); }

bool Server::admit_head(http::Request& req, http::Response& res) {
  res.set_header("X-Request-Id", begin_access_record(req).request_id);
  if (allow_cross_origin(req, res) && req.method == "OPTIONS") return true;  // a preflight carries no key
  const std::string authorization = req.header("Authorization");
  std::optional<ApiError> refused;
  if (req.path == "/metrics") {
    if (!auth_.metrics_allowed(authorization)) {
      refused = ApiError{401, "/metrics needs the metrics key (or an API key)", "invalid_request_error", "", "invalid_api_key"};
    }
  } else if (req.path.rfind("/v1/", 0) == 0 || req.path == "/tokenize" || req.path == "/detokenize") {  // not /health or the page
    refused = auth_.admit(authorization, req.has_header(auth::kPeerHeader));
  }
  if (!refused) return true;
  send_error(res, *refused);
  return false;
}

bool Server::allow_cross_origin(const http::Request& req, http::Response& res) const {
  const std::string origin = req.header("Origin");
  if (origin.empty() || config_.cors_origins.empty()) return false;
  const auto& allowed = config_.cors_origins;
  const bool any = std::find(allowed.begin(), allowed.end(), "*") != allowed.end();
  if (!any && std::find(allowed.begin(), allowed.end(), origin) == allowed.end()) return false;
  res.set_header("Access-Control-Allow-Origin", any ? "*" : origin);
  res.set_header("Vary", "Origin");
  return true;
}

void Server::log_exchange(const http::Request& req, const http::Response& res, bool complete) const {
  if (config_.access_log == AccessLogFormat::kOff || req.path == "/health" || req.path == "/metrics") return;
  AccessRecord fallback;  // a request the HTTP layer refused before its head was admitted
  fallback.started = std::chrono::steady_clock::now();
  const auto record = access_record_of(req);
  // A client gone before its answer is logged with nginx's 499.
  const int status = complete ? res.status : 499;
  const std::string line = format_access_line(record ? *record : fallback, req.method, req.path, status, config_.access_log);
  std::fprintf(stderr, "%s\n", line.c_str());
}

std::variant<Caller, ApiError> Server::caller_of(const http::Request& req) {
  auto caller = auth_.identify(req.method, req.path, req.header("Authorization"), req.header(auth::kPeerHeader), req.body);
  if (const auto* c = std::get_if<Caller>(&caller)) {
    if (auto record = access_record_of(req)) record->tenant = c->tenant;
  }
  return caller;
}

std::variant<Caller, ApiError> Server::peer_of(const http::Request& req) {
  auto caller = caller_of(req);
  if (const auto* c = std::get_if<Caller>(&caller); c != nullptr && !c->peer) {
    return ApiError{403, "'" + req.path + "' is internal to the cluster: only signed cluster peers may call it",
                    "permission_error", "", "internal_endpoint"};
  }
  return caller;
}

std::variant<ResponseStore*, ApiError> Server::store_or_error(const char* param) {
  if (store_ != nullptr) return store_.get();
  if (!store_problem_.empty()) return store_out_of_service();
  return bad_request("this server has no response store", param);
}

ApiError Server::store_out_of_service() const {
  return ApiError{503, "the response store is out of service: " + store_problem_, "server_error", "", "store_unavailable"};
}

void Server::install_routes() {
  http::Server& http = *http_;
  http.on_head([this](http::Request& req, http::Response& res) { return admit_head(req, res); });
  http.on_exchange_end([this](const http::Request& req, const http::Response& res, bool complete) {
    log_exchange(req, res, complete);
  });
  http.on_error_body([](http::Response& res, int status, const std::string& message) {
    const char* code = status == 413 ? "request_too_large" : status == 431 ? "headers_too_large" : "";
    send_error(res, ApiError{status, message, status >= 500 ? "server_error" : "invalid_request_error", "", code});
  });

  if (!config_.cors_origins.empty()) {
    // A browser's preflight: what a cross-origin page may send (admit_head set the origin).
    http.route_method("OPTIONS", [](http::Request&, http::Response& res) {
      res.status = 204;
      res.set_header("Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS");
      res.set_header("Access-Control-Allow-Headers", "Authorization, Content-Type, X-Session-ID");
      res.set_header("Access-Control-Max-Age", "600");
    });
  }
  http.route("GET", "/health", [](http::Request&, http::Response& res) {
    res.set_content(R"({"status":"ok"})", "application/json");
  });
  http.route("GET", "/metrics", [this](http::Request&, http::Response& res) {
    std::string text = render_metrics(engine_.metrics());
    text += render_edge_metrics(EdgeStats{auth_.refused_keys(), auth_.refused_peers(), store_problem_.empty() ? 0 : 1,
                                          store_ ? store_->wal_frames_dropped() : 0});
    text += render_http_metrics(http_->stats());
    if (const auto& disk = engine_.config().disk) text += render_disk_tier_metrics(disk->stats());
    if (transport_ != nullptr) {
      text += render_transport_metrics(transport_->stats()) + render_replication_metrics(replication_stats()) +
              render_receiver_metrics(receiver_.stats());
    }
    res.set_content(text, "text/plain; version=0.0.4");
  });
  http.route("GET", "/v1/models", [this](http::Request& req, http::Response& res) {
    if (auto caller = caller_of(req); std::holds_alternative<ApiError>(caller)) return send_error(res, std::get<ApiError>(caller));
    json cards = json::array();
    for (const ServedModel& model : models_) cards.push_back(model_card(model));
    res.set_content(json{{"object", "list"}, {"data", std::move(cards)}}.dump(), "application/json");
  });
  http.route_prefix("GET", "/v1/models/", [this](http::Request& req, http::Response& res) { handle_model(req, res); });
  http.route("POST", "/v1/embeddings", [this](http::Request& req, http::Response& res) { handle_embeddings(req, res); });
  http.route("POST", "/tokenize", [this](http::Request& req, http::Response& res) { handle_tokenize(req, res); });
  http.route("POST", "/detokenize", [this](http::Request& req, http::Response& res) { handle_detokenize(req, res); });
  http.route("POST", "/v1/chat/completions", [this](http::Request& req, http::Response& res) {
    handle_generation(req, res, Endpoint::kChat);
  });
  http.route("POST", "/v1/completions", [this](http::Request& req, http::Response& res) {
    handle_generation(req, res, Endpoint::kCompletions);
  });
  http.route("POST", "/v1/internal/kv_push", [this](http::Request& req, http::Response& res) { handle_kv_push(req, res); });
  http.route("GET", "/v1/internal/cache_events", [this](http::Request& req, http::Response& res) { handle_cache_events(req, res); });
  http.route("POST", "/v1/internal/responses_prompt", [this](http::Request& req, http::Response& res) {
    handle_responses_prompt(req, res);
  });
  http.route("POST", "/v1/internal/responses_import", [this](http::Request& req, http::Response& res) {
    handle_responses_import(req, res);
  });
  http.route("POST", "/v1/responses", [this](http::Request& req, http::Response& res) { handle_create_response(req, res); });
  // /v1/responses/{id} and /v1/responses/{id}/input_items.
  http.route_prefix(
      "GET", "/v1/responses/", [this](http::Request& req, http::Response& res) { handle_get_response(req, res); },
      /*nested=*/true);
  http.route_prefix("DELETE", "/v1/responses/", [this](http::Request& req, http::Response& res) {
    handle_delete_response(req, res);
  });
}

std::variant<const ServedModel*, ApiError> Server::model_named(const std::string& id) const {
  if (id.empty()) return &models_[0];
  std::string names;
  for (const ServedModel& model : models_) {
    if (model.id == id) return &model;
    names += (names.empty() ? "'" : ", '") + model.id + "'";
  }
  return ApiError{404, fmt::format("The model '{}' does not exist; this server serves {}.", id, names), "invalid_request_error",
                  "model", "model_not_found"};
}

const ServedModel& Server::served(const std::string& id) const {
  for (const ServedModel& model : models_) {
    if (model.id == id) return model;
  }
  return models_[0];
}

std::variant<std::vector<TokenId>, ApiError> Server::prompt_of(const ParsedRequest& request, Endpoint endpoint) const {
  const ServedModel& model = served(request.model);
  return prompt_tokens(*model.tokenizer, model.chat_template, request, endpoint == Endpoint::kChat);
}

uint64_t Server::cache_namespace_of(const Caller& caller, const ParsedRequest& request) {
  return cache_namespace(caller.tenant, request.cache_salt);
}

std::variant<PreparedRun, ApiError> Server::prepare(const Caller& caller, ParsedRequest& request, Endpoint endpoint) {
  const ServedModel& model = served(request.model);
  Engine& engine = *model.engine;
  if (endpoint == Endpoint::kChat) {
    if (auto error = prepare_tool_calls(model.chat_template, request)) return *error;
  }
  auto prompt_or_error = prompt_of(request, endpoint);
  if (auto* error = std::get_if<ApiError>(&prompt_or_error)) return *error;
  std::vector<TokenId> prompt = std::move(std::get<std::vector<TokenId>>(prompt_or_error));
  if (endpoint == Endpoint::kChat) prepare_reasoning(*model.tokenizer, model.chat_template, config_.split_reasoning, prompt, request);
  const int32_t context = engine.model().config().context_length;
  const int32_t n_prompt = static_cast<int32_t>(prompt.size());
  const char* prompt_field = endpoint == Endpoint::kChat ? "messages" : "prompt";
  if (n_prompt >= context) {
    return bad_request(fmt::format("This model's maximum context length is {} tokens; the prompt has {} tokens.", context, n_prompt),
                       prompt_field);
  }
  GenerationRequest& g = request.generation;
  if (g.cache_ttl_seconds > config_.max_cache_ttl_seconds) {
    return bad_request(config_.max_cache_ttl_seconds > 0
                           ? fmt::format("'cache_control' asks to keep the conversation for {} s; this server keeps it "
                                         "for at most {} s (--max-cache-ttl)",
                                         g.cache_ttl_seconds, config_.max_cache_ttl_seconds)
                           : std::string("'cache_control' ephemeral: this server takes no keep-alive (--max-cache-ttl 0)"),
                       "cache_control");
  }
  if (request.max_tokens_given && n_prompt + g.max_tokens > context) {
    return bad_request(fmt::format("This model's maximum context length is {} tokens. However, you requested {} "
                                   "tokens ({} in the prompt, {} for the completion).",
                                   context, n_prompt + g.max_tokens, n_prompt, g.max_tokens),
                       "max_tokens");
  }
  if (!request.max_tokens_given) g.max_tokens = context - n_prompt;
  g.prompt = std::move(prompt);
  g.cache_namespace = cache_namespace_of(caller, request);
  if (!request.seed_given) g.sampling.seed = config_.seed ? *config_.seed : random_seed();
  if (!request.temperature_given) g.sampling.temperature = model.sampling.temperature;
  if (!request.top_k_given) g.sampling.top_k = model.sampling.top_k;
  if (!request.top_p_given) g.sampling.top_p = model.sampling.top_p;
  if (!request.min_p_given) g.sampling.min_p = model.sampling.min_p;
  // A replica follows every token, including those whose text is held back.
  g.report_every_token = request.report_tokens || (!request.replica_endpoints.empty() && replicator_);

  auto slot = in_flight_slot();
  if (auto* error = std::get_if<ApiError>(&slot)) return *error;
  auto guard = std::move(std::get<std::shared_ptr<void>>(slot));
  auto stream = std::make_shared<RequestStream>();
  // Replicas follow the cluster's model (a cluster instance serves one model).
  std::vector<std::shared_ptr<KvReplicator::Replica>> replicas;
  if (&engine == &engine_) replicas = open_replicas(request, stream);
  auto submitted = engine.submit(g, stream);
  // A request the engine cannot run as asked (400), or an engine shutting down (503).
  if (!submitted.ok()) return api_error_of(submitted.error());
  return PreparedRun{std::move(stream), std::move(guard), std::move(replicas)};
}

std::variant<std::shared_ptr<void>, ApiError> Server::in_flight_slot() {
  if (in_flight_.fetch_add(1) >= config_.max_in_flight) {
    in_flight_.fetch_sub(1);
    return ApiError{429, "Too many concurrent requests; retry later.", "rate_limit_error", "", "rate_limit_exceeded"};
  }
  // Released when the request is fully answered (after the last streamed byte, too).
  return std::shared_ptr<void>(nullptr, [this](void*) { in_flight_.fetch_sub(1); });
}

std::vector<std::shared_ptr<KvReplicator::Replica>> Server::open_replicas(ParsedRequest& request,
                                                                          const std::shared_ptr<RequestStream>& stream) {
  std::vector<std::shared_ptr<KvReplicator::Replica>> replicas;
  GenerationRequest& g = request.generation;
  if (!replicator_ || g.n != 1) return replicas;
  std::vector<TokenId> tokens = g.prompt;
  tokens.insert(tokens.end(), g.resume_tokens.begin(), g.resume_tokens.end());
  const int32_t bs = engine_.config().block_size;
  for (size_t i = 0; i < request.replica_endpoints.size(); ++i) {
    const int32_t known = i < request.replica_known_tokens.size() ? request.replica_known_tokens[i] : 0;
    const bool at_end = i < request.replica_at_end.size() && request.replica_at_end[i];
    // The prompt's KV streams layer by layer to the first running replica; the others get whole
    // chunks after each step.
    std::shared_ptr<ReplicaTap> tap;
    if (!at_end && !g.prompt_tap && config_.stream_prompt_layers) {
      tap = std::make_shared<ReplicaTap>();
      g.prompt_tap = tap;
    }
    replicas.push_back(replicator_->open(request.replica_endpoints[i], g.cache_namespace, stream, tokens, known / bs,
                                         at_end, tap));
  }
  return replicas;
}

void Server::feed_replicas(const std::vector<std::shared_ptr<KvReplicator::Replica>>& replicas, const StreamEvent& event) {
  for (const auto& replica : replicas) {
    if (const auto* delta = std::get_if<TokenDelta>(&event)) {
      if (delta->choice == 0 && delta->token >= 0) replica->on_token(delta->token);
    } else if (std::holds_alternative<RequestDone>(event)) {
      replica->on_finished();
    }
  }
}

int32_t Server::replicated_tokens(const std::vector<std::shared_ptr<KvReplicator::Replica>>& replicas) const {
  int32_t chunks = 0;
  for (const auto& replica : replicas) chunks = std::max(chunks, replica->acknowledged_chunks());
  return chunks * engine_.config().block_size;
}

void Server::handle_generation(const http::Request& req, http::Response& res, Endpoint endpoint) {
  auto caller_or_error = caller_of(req);
  if (auto* error = std::get_if<ApiError>(&caller_or_error)) return send_error(res, *error);
  const Caller caller = std::get<Caller>(caller_or_error);
  auto body = parse_request_body(req.body);
  if (auto* error = std::get_if<ApiError>(&body)) return send_error(res, *error);
  if (auto refused = refuse_internal_fields(std::get<json>(body), caller)) return send_error(res, *refused);
  auto parsed = parse_request(std::get<json>(body), endpoint == Endpoint::kChat);
  if (auto* error = std::get_if<ApiError>(&parsed)) return send_error(res, *error);
  ParsedRequest request = std::move(std::get<ParsedRequest>(parsed));
  auto named = model_named(request.model);
  if (auto* error = std::get_if<ApiError>(&named)) return send_error(res, *error);
  const ServedModel& model = *std::get<const ServedModel*>(named);
  auto prepared = prepare(caller, request, endpoint);
  if (auto* error = std::get_if<ApiError>(&prepared)) return send_error(res, *error);
  PreparedRun run = std::move(std::get<PreparedRun>(prepared));
  const std::vector<std::shared_ptr<KvReplicator::Replica>>& replicas = run.replicas;
  const bool replica_wait = request.replica_wait;
  auto completion = std::make_shared<Completion>(endpoint, model.id, std::move(request), *model.tokenizer);
  // Runs where the stream is pulled: an I/O thread, or this handler thread for a replica wait.
  EventObserver observe = follow_run(req, run, *completion);
  if (replica_wait) {
    // A prefill for a decode instance (a router's internal request): answered once the decode
    // side holds the prompt's KV, so this handler thread waits.
    const ReplyShaper::Whole reply = gather_all(*run.stream, *completion, observe);
    constexpr auto kSettleWait = std::chrono::seconds(30);
    for (const auto& replica : replicas) (void)replica->wait_settled(kSettleWait);
    res.set_content(reply.body, "application/json");
    return;
  }
  const bool streamed = completion->streaming();
  answer_with(res, run.stream, run.in_flight_guard, std::move(completion), streamed, std::move(observe));
}

EventObserver Server::follow_run(const http::Request& req, const PreparedRun& run, ReplyShaper& shaper) {
  if (!run.replicas.empty()) shaper.set_replica_progress([this, replicas = run.replicas] { return replicated_tokens(replicas); });
  return [replicas = run.replicas, record = access_record_of(req)](const StreamEvent& event) {
    if (record) record->observe(event);
    feed_replicas(replicas, event);
  };
}

}  // namespace mnemo::server

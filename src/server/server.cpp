#include "server/server.h"

#include <algorithm>
#include <chrono>
#include <filesystem>

#include <cerrno>

#include <sys/socket.h>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "server/completion.h"
#include "server/metrics_text.h"
#include "server/prompt.h"

namespace mnemo::server {

using nlohmann::json;

Server::Server(Engine& engine, const Tokenizer& tokenizer, ChatTemplate chat_template, ServerConfig config)
    : engine_(engine),
      tokenizer_(tokenizer),
      chat_template_(std::move(chat_template)),
      config_(std::move(config)),
      http_(std::make_unique<httplib::Server>()),
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
  if (config_.port == 0) {
    bound_port_ = http_->bind_to_any_port(config_.host);
  } else {
    errno = 0;
    bound_port_ = http_->bind_to_port(config_.host, config_.port) ? config_.port : -1;
  }
  if (bound_port_ <= 0) {
    return make_error("cannot listen on {}:{}{}", config_.host, config_.port, errno == EADDRINUSE ? ": address in use" : "");
  }
  // httplib listens with a backlog of 5: a burst of clients (32 at once) overflows it while the
  // accept thread waits for a core, and the kernel drops connections. Listening again on the
  // bound socket only raises the backlog.
  if (const int fd = listen_fd_.load(); fd >= 0 && ::listen(fd, SOMAXCONN) != 0) {
    return make_error("cannot listen on {}:{}", config_.host, config_.port);
  }
  return ok_status();
}

void Server::serve() { http_->listen_after_bind(); }

void Server::stop() {
  // httplib's own stop() also ends every response being streamed at its next chunk (its chunked
  // writer gives up once the server is "shutting down"), cutting SSE streams mid-body. Shutting
  // the listening socket down instead makes accept() fail, so the accept loop ends and new
  // connections are refused, while the worker threads finish the requests in flight.
  // Once only: httplib then closes the socket but keeps its number, which a second stop() (of
  // either kind) must not touch.
  constexpr int kStopped = -2;
  const int fd = listen_fd_.exchange(kStopped);
  if (fd == kStopped) return;
  if (fd < 0 || ::shutdown(fd, SHUT_RDWR) != 0) http_->stop();
}

namespace {

// Refuses before the body is read; the connection closes, or the unread body would be parsed as
// the next request on this keep-alive connection.
httplib::Server::HandlerResponse refuse_early(httplib::Response& res, const ApiError& error) {
  send_error(res, error);
  res.set_header("Connection", "close");
  return httplib::Server::HandlerResponse::Handled;
}

}  // namespace

void Server::post(const std::string& pattern, std::function<void(const httplib::Request&, httplib::Response&)> handler) {
  http_->Post(pattern, [this, handler = std::move(handler)](const httplib::Request& req, httplib::Response& res,
                                                           const httplib::ContentReader& read_content) {
    std::string body;
    bool too_large = false;
    read_content([&](const char* data, size_t length) {
      if (body.size() + length > config_.max_body_bytes) {
        too_large = true;
        return false;
      }
      body.append(data, length);
      return true;
    });
    if (too_large || res.status == 413) {
      res.set_header("Connection", "close");
      return send_error(res, ApiError{413, fmt::format("the request body is larger than {} bytes", config_.max_body_bytes),
                                      "invalid_request_error", "", "request_too_large"});
    }
    httplib::Request with_body = req;
    with_body.body = std::move(body);
    handler(with_body, res);
  });
}

std::variant<Caller, ApiError> Server::caller_of(const httplib::Request& req) {
  auto caller = auth_.identify(req.method, req.path, req.get_header_value("Authorization"),
                               req.get_header_value(auth::kPeerHeader), req.body);
  if (const auto* c = std::get_if<Caller>(&caller)) current_access_record().tenant = c->tenant;
  return caller;
}

std::variant<Caller, ApiError> Server::peer_of(const httplib::Request& req) {
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
  httplib::Server& http = *http_;
  // One thread serves one connection at a time, and stays with it for httplib's keep-alive wait
  // (5 s) after each response.
  const int threads = std::max(config_.max_connections, 8);
  http.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  http.set_payload_max_length(config_.max_body_bytes);
  // Called for the listening socket only (accepted sockets get no options): remember it for
  // stop(). SO_REUSEADDR only: httplib's default SO_REUSEPORT would let a second server bind the
  // same port and silently take half of its connections.
  http.set_socket_options([this](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    listen_fd_.store(static_cast<int>(sock));
  });
  http.set_read_timeout(std::chrono::seconds(30));
  // A client (or a router relaying to a slow one) may stop reading a stream for a while; the
  // request is not given up on until it has for this long.
  http.set_write_timeout(std::chrono::seconds(60));

  http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    begin_access_record();
    res.set_header("X-Request-Id", current_access_record().request_id);
    if (req.headers.size() > config_.max_header_count) {
      return refuse_early(res, ApiError{431, fmt::format("more than {} header fields", config_.max_header_count),
                                        "invalid_request_error", "", "headers_too_large"});
    }
    const std::string authorization = req.get_header_value("Authorization");
    if (req.path == "/metrics") {
      if (auth_.metrics_allowed(authorization)) return httplib::Server::HandlerResponse::Unhandled;
      return refuse_early(res, ApiError{401, "/metrics needs the metrics key (or an API key)", "invalid_request_error", "",
                                        "invalid_api_key"});
    }
    if (req.path.rfind("/v1/", 0) != 0) return httplib::Server::HandlerResponse::Unhandled;  // /health, the page
    if (auto refused = auth_.admit(authorization, req.has_header(auth::kPeerHeader))) return refuse_early(res, *refused);
    return httplib::Server::HandlerResponse::Unhandled;
  });
  http.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    if (config_.access_log == AccessLogFormat::kOff || req.path == "/health" || req.path == "/metrics") return;
    const std::string line = format_access_line(current_access_record(), req.method, req.path, res.status, config_.access_log);
    std::fprintf(stderr, "%s\n", line.c_str());
  });
  http.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    std::string message = "error";
    if (res.status == 404) message = "no route for " + req.method + " " + req.path;
    if (res.status == 413) message = "the request body is too large";
    if (res.status == 414) message = "the request URI is too long";
    if (res.status == 400) message = "malformed HTTP request";
    send_error(res, ApiError{res.status, message, res.status >= 500 ? "server_error" : "invalid_request_error", "", ""});
  });
  http.set_exception_handler([](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
    // A bug, not the client's fault: logged with its text, answered without it.
    std::string what = "unknown exception";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    std::fprintf(stderr, "mnemo: internal error serving %s %s: %s\n", req.method.c_str(), req.path.c_str(), what.c_str());
    send_error(res, ApiError{500, "internal error", "server_error", "", ""});
  });

  http.Get("/health", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"status":"ok"})", "application/json");
  });
  http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    std::string text = render_metrics(engine_.metrics());
    text += render_edge_metrics(EdgeStats{auth_.refused_keys(), auth_.refused_peers(), store_problem_.empty() ? 0 : 1,
                                          store_ ? store_->wal_frames_dropped() : 0});
    if (const auto& disk = engine_.config().disk) text += render_disk_tier_metrics(disk->stats());
    if (transport_ != nullptr) {
      text += render_transport_metrics(transport_->stats()) + render_replication_metrics(replication_stats()) +
              render_receiver_metrics(receiver_.stats());
    }
    res.set_content(text, "text/plain; version=0.0.4");
  });
  http.Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
    if (auto caller = caller_of(req); std::holds_alternative<ApiError>(caller)) return send_error(res, std::get<ApiError>(caller));
    const json models = {{"object", "list"},
                         {"data", json::array({{{"id", config_.model_id},
                                                {"object", "model"},
                                                {"created", 0},
                                                {"owned_by", "mnemo"},
                                                {"context_length", engine_.model().config().context_length}}})}};
    res.set_content(models.dump(), "application/json");
  });
  post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    handle_generation(req, res, Endpoint::kChat);
  });
  post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    handle_generation(req, res, Endpoint::kCompletions);
  });
  post("/v1/internal/kv_push", [this](const httplib::Request& req, httplib::Response& res) { handle_kv_push(req, res); });
  http.Get("/v1/internal/cache_events", [this](const httplib::Request& req, httplib::Response& res) { handle_cache_events(req, res); });
  post("/v1/internal/responses_prompt", [this](const httplib::Request& req, httplib::Response& res) {
    handle_responses_prompt(req, res);
  });
  post("/v1/internal/responses_import", [this](const httplib::Request& req, httplib::Response& res) {
    handle_responses_import(req, res);
  });
  post("/v1/responses", [this](const httplib::Request& req, httplib::Response& res) { handle_create_response(req, res); });
  http.Get(R"(/v1/responses/([A-Za-z0-9_\-]+))", [this](const httplib::Request& req, httplib::Response& res) {
    handle_get_response(req, res);
  });
  http.Delete(R"(/v1/responses/([A-Za-z0-9_\-]+))", [this](const httplib::Request& req, httplib::Response& res) {
    handle_delete_response(req, res);
  });
  if (!config_.ui_dir.empty() && std::filesystem::is_directory(config_.ui_dir)) {
    http.set_mount_point("/", config_.ui_dir);
  }
}

Result<std::vector<TokenId>> Server::render_chat(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const {
  return server::render_chat(tokenizer_, chat_template_, messages, add_generation_prompt);
}

std::variant<std::vector<TokenId>, ApiError> Server::prompt_of(const ParsedRequest& request, Endpoint endpoint) const {
  return prompt_tokens(tokenizer_, chat_template_, request, endpoint == Endpoint::kChat);
}

uint64_t Server::cache_namespace_of(const Caller& caller, const ParsedRequest& request) {
  return cache_namespace(caller.tenant, request.cache_salt);
}

std::variant<PreparedRun, ApiError> Server::prepare(const Caller& caller, ParsedRequest& request, Endpoint endpoint) {
  auto prompt_or_error = prompt_of(request, endpoint);
  if (auto* error = std::get_if<ApiError>(&prompt_or_error)) return *error;
  std::vector<TokenId> prompt = std::move(std::get<std::vector<TokenId>>(prompt_or_error));
  const int32_t context = engine_.model().config().context_length;
  const int32_t n_prompt = static_cast<int32_t>(prompt.size());
  const char* prompt_field = endpoint == Endpoint::kChat ? "messages" : "prompt";
  if (n_prompt >= context) {
    return bad_request(fmt::format("This model's maximum context length is {} tokens; the prompt has {} tokens.", context, n_prompt),
                       prompt_field);
  }
  GenerationRequest& g = request.generation;
  if (request.max_tokens_given && n_prompt + g.max_tokens > context) {
    return bad_request(fmt::format("This model's maximum context length is {} tokens. However, you requested {} "
                                   "tokens ({} in the prompt, {} for the completion).",
                                   context, n_prompt + g.max_tokens, n_prompt, g.max_tokens),
                       "max_tokens");
  }
  if (!request.max_tokens_given) g.max_tokens = context - n_prompt;
  g.prompt = std::move(prompt);
  g.cache_namespace = cache_namespace_of(caller, request);
  // A replica follows every token, including those whose text is held back.
  g.report_every_token = request.report_tokens || (!request.replica_endpoints.empty() && replicator_);

  if (in_flight_.fetch_add(1) >= config_.max_in_flight) {
    in_flight_.fetch_sub(1);
    return ApiError{429, "Too many concurrent requests; retry later.", "rate_limit_error", "", "rate_limit_exceeded"};
  }
  // Released when the request is fully answered (after the last streamed byte, too).
  auto guard = std::shared_ptr<void>(nullptr, [this](void*) { in_flight_.fetch_sub(1); });
  auto stream = std::make_shared<RequestStream>();
  std::vector<std::shared_ptr<KvReplicator::Replica>> replicas = open_replicas(request, stream);
  auto submitted = engine_.submit(g, stream);
  // A request the engine cannot run as asked (a resume that leaves nothing to generate). Errors
  // do not yet carry a code that would tell this from a shutdown (503): issue 23's Error codes.
  if (!submitted.ok()) return bad_request(submitted.error().message());
  return PreparedRun{std::move(stream), std::move(guard), std::move(replicas)};
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

void Server::handle_generation(const httplib::Request& req, httplib::Response& res, Endpoint endpoint) {
  auto caller_or_error = caller_of(req);
  if (auto* error = std::get_if<ApiError>(&caller_or_error)) return send_error(res, *error);
  const Caller caller = std::get<Caller>(caller_or_error);
  auto body = parse_request_body(req.body);
  if (auto* error = std::get_if<ApiError>(&body)) return send_error(res, *error);
  if (auto refused = refuse_internal_fields(std::get<json>(body), caller)) return send_error(res, *refused);
  auto parsed = parse_request(std::get<json>(body), endpoint == Endpoint::kChat);
  if (auto* error = std::get_if<ApiError>(&parsed)) return send_error(res, *error);
  ParsedRequest request = std::move(std::get<ParsedRequest>(parsed));
  if (!request.model.empty() && request.model != config_.model_id) {
    return send_error(res, ApiError{404, "The model '" + request.model + "' does not exist; this server serves '" +
                                             config_.model_id + "'.",
                                    "invalid_request_error", "model", "model_not_found"});
  }
  auto prepared = prepare(caller, request, endpoint);
  if (auto* error = std::get_if<ApiError>(&prepared)) return send_error(res, *error);
  PreparedRun run = std::move(std::get<PreparedRun>(prepared));
  const std::vector<std::shared_ptr<KvReplicator::Replica>> replicas = run.replicas;
  const bool replica_wait = request.replica_wait;
  auto completion = std::make_shared<Completion>(endpoint, config_.model_id, std::move(request), run.stream, tokenizer_);
  // Runs on the HTTP thread that relays the stream, the thread whose access record this is.
  completion->set_observer([replicas](const StreamEvent& event) {
    current_access_record().observe(event);
    feed_replicas(replicas, event);
  });
  if (!replicas.empty()) {
    // How far a failover can go without recompute: the replica that got furthest.
    completion->set_replica_progress([this, replicas] { return replicated_tokens(replicas); });
  }
  if (!completion->streaming()) {
    const json reply = completion->run_to_completion();
    if (replica_wait) {
      // A prefill for a decode instance: done once the decode side holds the prompt's KV.
      constexpr auto kSettleWait = std::chrono::seconds(30);
      for (const auto& replica : replicas) (void)replica->wait_settled(kSettleWait);
    }
    res.set_content(reply.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
    return;
  }
  res.set_header("Cache-Control", "no-cache");
  auto guard = run.in_flight_guard;
  res.set_chunked_content_provider(
      "text/event-stream",
      [completion, guard](size_t, httplib::DataSink& sink) {
        if (!sink.is_writable()) {
          completion->cancel();
          return false;
        }
        bool done = false;
        const std::string events = completion->next_events(done);
        if (!events.empty() && !sink.write(events.data(), events.size())) {
          completion->cancel();
          return false;
        }
        if (done) sink.done();
        return true;
      },
      [completion](bool success) {
        // The client went away before the end: cancel, so the engine frees the KV next step.
        if (!success) completion->cancel();
      });
}

}  // namespace mnemo::server

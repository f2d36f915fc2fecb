#include "server/server.h"

#include <algorithm>
#include <chrono>
#include <filesystem>

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
      http_(std::make_unique<httplib::Server>()) {
  install_routes();
}

Server::~Server() = default;

Status Server::bind() {
  if (!config_.response_store.empty()) {
    MNEMO_ASSIGN_OR_RETURN(store_, ResponseStore::open(config_.response_store));
  }
  if (config_.port == 0) {
    bound_port_ = http_->bind_to_any_port(config_.host);
  } else {
    bound_port_ = http_->bind_to_port(config_.host, config_.port) ? config_.port : -1;
  }
  if (bound_port_ <= 0) return make_error("cannot listen on {}:{}", config_.host, config_.port);
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

void Server::install_routes() {
  httplib::Server& http = *http_;
  // One thread serves one connection at a time, and stays with it for httplib's keep-alive wait
  // (5 s) after each response: with fewer threads than requests allowed in flight, a burst of
  // clients queues behind idle keep-alive connections. Room for every request in flight, plus a
  // few for /health and /metrics.
  const int threads = std::max(config_.http_threads, config_.max_connections + 8);
  http.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  http.set_payload_max_length(config_.max_body_bytes);
  // Called for the listening socket only (accepted sockets get no options): remember it for stop().
  http.set_socket_options([this](socket_t sock) {
    httplib::default_socket_options(sock);
    listen_fd_.store(static_cast<int>(sock));
  });
  http.set_read_timeout(std::chrono::seconds(30));
  // A client (or a router relaying to a slow one) may stop reading a stream for a while; the
  // request is not given up on until it has for this long.
  http.set_write_timeout(std::chrono::seconds(60));

  http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (config_.api_key.empty() || req.path.rfind("/v1/", 0) != 0) return httplib::Server::HandlerResponse::Unhandled;
    if (req.get_header_value("Authorization") != "Bearer " + config_.api_key) {
      send_error(res, ApiError{401, "Incorrect or missing API key (Authorization: Bearer ...).", "invalid_request_error", "",
                               "invalid_api_key"});
      // The body was never read (pre-routing runs before that): close the connection, or its
      // bytes would be parsed as the next request on this keep-alive connection (a 400).
      res.set_header("Connection", "close");
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  http.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    std::string message = "error";
    if (res.status == 404) message = "no route for " + req.method + " " + req.path;
    if (res.status == 413) message = "the request body is too large";
    if (res.status == 400) message = "malformed HTTP request";
    send_error(res, ApiError{res.status, message, res.status >= 500 ? "server_error" : "invalid_request_error", "", ""});
  });
  http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string message = "internal error";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      message = e.what();
    } catch (...) {
    }
    send_error(res, ApiError{500, message, "server_error", "", ""});
  });

  http.Get("/health", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"status":"ok"})", "application/json");
  });
  http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    std::string text = render_metrics(engine_.metrics());
    if (transport_ != nullptr) {
      text += render_transport_metrics(transport_->stats()) + render_replication_metrics(replication_stats()) +
              render_receiver_metrics(receiver_.stats());
    }
    res.set_content(text, "text/plain; version=0.0.4");
  });
  http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    const json models = {{"object", "list"},
                         {"data", json::array({{{"id", config_.model_id},
                                                {"object", "model"},
                                                {"created", 0},
                                                {"owned_by", "mnemo"},
                                                {"context_length", engine_.model().config().context_length}}})}};
    res.set_content(models.dump(), "application/json");
  });
  http.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    handle_generation(req, res, Endpoint::kChat);
  });
  http.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    handle_generation(req, res, Endpoint::kCompletions);
  });
  http.Post("/v1/internal/kv_push", [this](const httplib::Request& req, httplib::Response& res) { handle_kv_push(req, res); });
  http.Get("/v1/internal/cache_events", [this](const httplib::Request& req, httplib::Response& res) { handle_cache_events(req, res); });
  http.Post("/v1/internal/responses_prompt", [this](const httplib::Request& req, httplib::Response& res) {
    handle_responses_prompt(req, res);
  });
  http.Post("/v1/internal/responses_import", [this](const httplib::Request& req, httplib::Response& res) {
    handle_responses_import(req, res);
  });
  http.Post("/v1/responses", [this](const httplib::Request& req, httplib::Response& res) {
    handle_create_response(req, res);
  });
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

uint64_t Server::cache_namespace_of(const httplib::Request& req, const ParsedRequest& request) {
  return cache_namespace(req.get_header_value("Authorization"), request.cache_salt);
}

std::variant<PreparedRun, ApiError> Server::prepare(const httplib::Request& req, ParsedRequest& request, Endpoint endpoint) {
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
  g.cache_namespace = cache_namespace_of(req, request);
  // A replica follows every token, including those whose text is held back.
  g.report_every_token = request.report_tokens || (!request.replica_endpoints.empty() && replicator_);

  if (in_flight_.fetch_add(1) >= config_.max_connections) {
    in_flight_.fetch_sub(1);
    return ApiError{429, "Too many concurrent requests; retry later.", "rate_limit_error", "", "rate_limit_exceeded"};
  }
  // Released when the request is fully answered (after the last streamed byte, too).
  auto guard = std::shared_ptr<void>(nullptr, [this](void*) { in_flight_.fetch_sub(1); });
  auto stream = std::make_shared<RequestStream>();
  std::vector<std::shared_ptr<KvReplicator::Replica>> replicas = open_replicas(request, stream);
  auto submitted = engine_.submit(g, stream);
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
  auto parsed = parse_request(req.body, endpoint == Endpoint::kChat);
  if (auto* error = std::get_if<ApiError>(&parsed)) return send_error(res, *error);
  ParsedRequest request = std::move(std::get<ParsedRequest>(parsed));
  if (!request.model.empty() && request.model != config_.model_id) {
    return send_error(res, ApiError{404, "The model '" + request.model + "' does not exist; this server serves '" +
                                             config_.model_id + "'.",
                                    "invalid_request_error", "model", "model_not_found"});
  }
  auto prepared = prepare(req, request, endpoint);
  if (auto* error = std::get_if<ApiError>(&prepared)) return send_error(res, *error);
  PreparedRun run = std::move(std::get<PreparedRun>(prepared));
  const std::vector<std::shared_ptr<KvReplicator::Replica>> replicas = run.replicas;
  const bool replica_wait = request.replica_wait;
  auto completion = std::make_shared<Completion>(endpoint, config_.model_id, std::move(request), run.stream, tokenizer_);
  if (!replicas.empty()) {
    completion->set_observer([replicas](const StreamEvent& event) { feed_replicas(replicas, event); });
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

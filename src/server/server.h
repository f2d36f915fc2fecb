// The OpenAI-compatible HTTP server (on http::Server): POST /v1/chat/completions and
// /v1/completions (streamed as server-sent events in OpenAI's format, or whole), the Responses
// API, GET /v1/models, /health, /metrics (Prometheus text) and the web chat page at /. Handler
// threads parse, render, tokenize and submit to the engine; the request's events then reach its
// client through an EngineBody pulled by the I/O threads, holding no thread while it waits. A
// client that goes away cancels its request, streamed or not.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>

#include "chat/chat_template.h"
#include "engine/engine.h"
#include "http/server.h"
#include "server/access_log.h"
#include "server/caller.h"
#include "server/completion.h"
#include "server/sampling_defaults.h"
#include "server/kv_receiver.h"
#include "server/kv_replicator.h"
#include "server/response_store.h"
#include "server/responses_request.h"
#include "tokenizer/tokenizer.h"
#include "transfer/kv_transport.h"


namespace mnemo::server {

struct ServerConfig {
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string model_id;  // the name clients use in "model"
  CallerAuthConfig auth;  // API keys (tenants), the metrics key, the cluster secret
  std::string ui_dir;    // static files of the web page
  size_t max_body_bytes = 8u << 20;  // Content-Length and chunked bodies alike; more get 413
  size_t max_header_count = 100;     // more get 431
  int max_in_flight = 64;      // requests being generated at once; more get 429
  int max_connections = 4096;  // connections open at once (none holds a thread); more get 503
  http::TlsFiles tls;          // TLS on the port when a certificate is given
  AccessLogFormat access_log = AccessLogFormat::kText;
  std::string response_store;  // SQLite file of the Responses API ("" : no store)
  // A prompt's KV goes to its first running replica layer by layer while it is computed (SPEC
  // D3); false: whole chunks after each step.
  bool stream_prompt_layers = true;
  // The sampling seed of requests that give none: drawn at random per request (so "regenerate"
  // gives a new answer), or this one for a deterministic server (`--seed`).
  std::optional<uint64_t> seed;
  // Temperature, top-k, top-p and min-p of requests that leave them out.
  SamplingDefaults sampling;
  // Origins whose pages may call the API from a browser ("*": any); none: no CORS headers.
  std::vector<std::string> cors_origins;
  // The longest keep-alive a request's cache_control may ask for (its ttl), seconds; 0: pins
  // are refused. Pins are soft, yet a client that pins everything for long turns the cache into
  // its own LRU: the bound is the operator's.
  double max_cache_ttl_seconds = 3600;
  // Chat replies of models whose template shows reasoning tags (<think>) return the reasoning
  // apart, as reasoning_content (`--reasoning-format auto`, llama-server's default); false: the
  // reply's text as the model wrote it (`none`).
  bool split_reasoning = true;
};

// A request handed to the engine: its stream, and the slot it holds among the requests in flight
// (released when the last copy of the guard goes).
struct PreparedRun {
  std::shared_ptr<RequestStream> stream;
  std::shared_ptr<void> in_flight_guard;
  // Replicas the request asked for (mnemo_replica fields), opened before it was submitted, so
  // that its first step's layers already stream to the first running one.
  std::vector<std::shared_ptr<KvReplicator::Replica>> replicas;
};

// One model a server serves: requests name it by `id` in "model". Each has its own engine, so its
// own KV pool (its share of the memory the server was given) and its own cache.
struct ServedModel {
  std::string id;
  Engine* engine = nullptr;
  const Tokenizer* tokenizer = nullptr;
  ChatTemplate chat_template;
  SamplingDefaults sampling;  // of requests that leave them out
  Pooling pooling = Pooling::kMean;  // of its embeddings (/v1/embeddings)
};

class Server {
 public:
  // One model: `config.model_id` and `config.sampling` name it and give its defaults.
  Server(Engine& engine, const Tokenizer& tokenizer, ChatTemplate chat_template, ServerConfig config);
  // Several: the first is the default (a request without "model") and the cluster's (KV
  // transport, cache events, metrics of the engine).
  Server(std::vector<ServedModel> models, ServerConfig config);
  ~Server();

  // KV transfer between instances (SPEC M2): the transport pushes and replicas go out through,
  // and the fingerprint of this instance's model and KV layout (a message of another is
  // refused). nullptr detaches it (before the transport is destroyed).
  void attach_kv_transport(transfer::KvTransport* transport, uint64_t layout_fingerprint);
  // The replicas of requests in flight sent so far (zeros without a transport).
  ReplicationStats replication_stats() const;
  // The transport's handler: inserts received chunks into the cache and acknowledges once the
  // engine has (the transport's progress thread does not wait for it meanwhile).
  void receive_kv(transfer::KvMessage&& message, transfer::Acknowledge acknowledge);

  // Opens the response store and binds the port (an Error if the port cannot be bound). A store
  // that cannot be opened, or is damaged, is reported and left out: chat and completions serve,
  // the Responses API answers 503.
  Status bind();
  // Why the Responses store is out of service ("" if it is not).
  const std::string& store_problem() const { return store_problem_; }
  int port() const { return bound_port_; }
  void serve();
  // Stops accepting connections; requests in flight run to completion (or until the engine is
  // shut down, which cancels them).
  void stop();
  http::ServerStats http_stats() const { return http_->stats(); }

 private:
  void install_routes();
  // What the HTTP layer checks once a request's head is in: its id, keys, the metrics key.
  bool admit_head(http::Request& req, http::Response& res);
  // Sets the CORS headers when the request's Origin is allowed (ServerConfig::cors_origins).
  bool allow_cross_origin(const http::Request& req, http::Response& res) const;
  void log_exchange(const http::Request& req, const http::Response& res, bool complete) const;
  // The caller of a request whose body is read (its tenant; whether it is a cluster peer).
  std::variant<Caller, ApiError> caller_of(const http::Request& req);
  // The caller, if it is a peer; else the error to send (internal endpoints).
  std::variant<Caller, ApiError> peer_of(const http::Request& req);
  // The Responses store, or the error that says why there is none to use.
  std::variant<ResponseStore*, ApiError> store_or_error(const char* param);
  // The 503 of a store that could not be opened (store_problem_ is set).
  ApiError store_out_of_service() const;
  void handle_generation(const http::Request& req, http::Response& res, Endpoint endpoint);
  void handle_create_response(const http::Request& req, http::Response& res);
  // A Responses API request read (server/responses_request.h), its messages completed with the
  // stored history it continues.
  using ResponsesTurn = ResponsesRequest;
  std::variant<ResponsesTurn, ApiError> read_responses_turn(const nlohmann::json& body, const Caller& caller) const;
  // POST /v1/internal/responses_prompt: the prompt tokens a Responses API request would run
  // here (its stored history included), for a router that has another instance compute them
  // (disaggregated prefill, SPEC D4).
  void handle_responses_prompt(const http::Request& req, http::Response& res);
  // POST /v1/internal/responses_import {"request", "response"}: stores another instance's
  // finished turn (a router keeps a stored conversation on its KV replica holders too, so the
  // conversation outlives its instance). Refused unless the turn it continues is stored here.
  void handle_responses_import(const http::Request& req, http::Response& res);
  // The KV replicas a request asked for (mnemo_replica: a failover copy or Caching-3's copy
  // back), following its stream; fed its events.
  // Opens the replicas `request` asks for on `stream` (not yet submitted), and sets its prompt tap.
  std::vector<std::shared_ptr<KvReplicator::Replica>> open_replicas(ParsedRequest& request,
                                                                    const std::shared_ptr<RequestStream>& stream);
  static void feed_replicas(const std::vector<std::shared_ptr<KvReplicator::Replica>>& replicas, const StreamEvent& event);
  // What follows a run's events as they go to its client: its access record and its replicas,
  // whose progress `shaper` reports (how far a failover can go without recompute).
  EventObserver follow_run(const http::Request& req, const PreparedRun& run, ReplyShaper& shaper);
  // How many of a request's tokens a failover could resume without recompute: the leading
  // chunks the furthest of its replicas acknowledged.
  int32_t replicated_tokens(const std::vector<std::shared_ptr<KvReplicator::Replica>>& replicas) const;
  void handle_get_response(const http::Request& req, http::Response& res);
  // The tokenizer over HTTP in llama-server's shape, and GET /v1/models/{id}
  // (server/token_endpoints.cpp).
  std::variant<nlohmann::json, ApiError> tokenizer_body(const http::Request& req);
  void handle_tokenize(const http::Request& req, http::Response& res);
  void handle_detokenize(const http::Request& req, http::Response& res);
  nlohmann::json model_card(const ServedModel& model) const;
  // The model a request names ("": the first), or a 404 naming those served.
  std::variant<const ServedModel*, ApiError> model_named(const std::string& id) const;
  // The model of a request already checked by model_named (the first if none matches).
  const ServedModel& served(const std::string& id) const;
  // The model a tokenizer endpoint's optional "model" field names.
  std::variant<const ServedModel*, ApiError> model_of_body(const nlohmann::json& body) const;
  void handle_model(const http::Request& req, http::Response& res);
  // POST /v1/embeddings (server/embeddings_endpoint.cpp).
  void handle_embeddings(const http::Request& req, http::Response& res);
  void handle_delete_response(const http::Request& req, http::Response& res);
  // The tokens of a stored conversation as the model saw them: the last turn's instructions, the
  // history, its reply last (empty if the template fails).
  std::vector<TokenId> conversation_tokens(const ServedModel& model, const nlohmann::json& last_response,
                                           const std::vector<ChatMessage>& history) const;
  // The prompt as the model sees it (chat template, tokenizer), or why not.
  std::variant<std::vector<TokenId>, ApiError> prompt_of(const ParsedRequest& request, Endpoint endpoint) const;
  static uint64_t cache_namespace_of(const Caller& caller, const ParsedRequest& request);
  // POST /v1/internal/kv_push (server/kv_push.cpp): sends the cached KV of a request's prompt
  // to another instance's transport (a router asks, when the KV moving beats recomputing it).
  void handle_kv_push(const http::Request& req, http::Response& res);
  // GET /v1/internal/cache_events (server/cache_events_endpoint.cpp): the cache's insert and
  // evict events, long-polled by routers.
  void handle_cache_events(const http::Request& req, http::Response& res);
  // One of the --max-in-flight slots, held by the guard until the request is fully answered; a
  // 429 when none is free.
  std::variant<std::shared_ptr<void>, ApiError> in_flight_slot();
  // Prompt tokens, limits, tenant, admission: everything between a parsed request and the engine.
  std::variant<PreparedRun, ApiError> prepare(const Caller& caller, ParsedRequest& request, Endpoint endpoint);

  std::vector<ServedModel> models_;
  Engine& engine_;  // the first model's: the cluster's
  ServerConfig config_;
  std::unique_ptr<http::Server> http_;
  int bound_port_ = 0;
  std::atomic<int> in_flight_{0};
  CallerAuth auth_;
  std::unique_ptr<ResponseStore> store_;
  std::string store_problem_;  // why the store could not be opened ("" : it is open, or none is configured)
  transfer::KvTransport* transport_ = nullptr;
  uint64_t layout_fingerprint_ = 0;
  std::unique_ptr<KvReplicator> replicator_;  // with a transport
  KvReceiver receiver_{engine_};              // KV other instances send here
};

}  // namespace mnemo::server

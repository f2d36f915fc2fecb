// The OpenAI-compatible HTTP server (cpp-httplib): POST /v1/chat/completions and
// /v1/completions (streamed as server-sent events in OpenAI's format, or whole), GET /v1/models,
// /health, /metrics (Prometheus text) and the web chat page at /. HTTP threads parse, render,
// tokenize and submit to the engine, then relay the request's stream; a client that goes away
// cancels its request.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "chat/chat_template.h"
#include "engine/engine.h"
#include "server/completion.h"
#include "tokenizer/tokenizer.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}

namespace mnemo::server {

struct ServerConfig {
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string model_id;  // the name clients use in "model"
  std::string api_key;   // empty: no authentication
  std::string ui_dir;    // static files of the web page
  size_t max_body_bytes = 8u << 20;
  int max_connections = 64;  // concurrent requests in flight; more get 503
  int http_threads = 16;
};

class Server {
 public:
  Server(Engine& engine, const Tokenizer& tokenizer, ChatTemplate chat_template, ServerConfig config);
  ~Server();

  // Binds the port (an Error if it cannot), then serves until stop().
  Status bind();
  int port() const { return bound_port_; }
  void serve();
  // Stops accepting connections; requests in flight run to completion (or until the engine is
  // shut down, which cancels them).
  void stop();

 private:
  void install_routes();
  void handle_generation(const httplib::Request& req, httplib::Response& res, Endpoint endpoint);

  Engine& engine_;
  const Tokenizer& tokenizer_;
  ChatTemplate chat_template_;
  ServerConfig config_;
  std::unique_ptr<httplib::Server> http_;
  int bound_port_ = 0;
  std::atomic<int> in_flight_{0};
};

}  // namespace mnemo::server

// The event-driven HTTP/1.1 server under `mnemo serve` (Boost.Beast over Asio, from Debian's
// libboost-dev: maintained, header-only, with per-operation timeouts, parser limits on headers
// and bodies (chunked ones too) and TLS over OpenSSL).
//
// A few I/O threads own every socket: reading a request's head and body within deadlines and
// limits, writing responses, pumping streamed bodies. No connection holds a thread while it
// waits: a slow client (slowloris), an idle keep-alive connection or an SSE stream waiting for
// its next token costs a socket and a little memory. Handlers run on a small pool of handler
// threads once a request is whole; a response that waits for the engine returns a BodySource
// instead of blocking one. While a deferred or streamed body is pending the connection watches
// its socket, so a client that goes away cancels its request at once.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "http/message.h"
#include "util/result.h"

namespace mnemo::http {

struct Limits {
  size_t max_header_bytes = 32 << 10;  // the request line and headers; more get 431
  size_t max_header_count = 100;       // more get 431
  size_t max_body_bytes = 8u << 20;    // Content-Length or chunked alike; more get 413
  int max_connections = 4096;          // open at once; more are answered 503 and closed
  std::chrono::milliseconds header_timeout{10'000};  // from the first byte of a request to its last header
  std::chrono::milliseconds body_timeout{60'000};    // for the whole body
  std::chrono::milliseconds idle_timeout{15'000};    // a keep-alive connection between requests
  std::chrono::milliseconds write_timeout{60'000};   // one write (a client that stops reading)
};

struct TlsFiles {
  std::string cert_file;  // PEM certificate chain
  std::string key_file;   // PEM private key
  bool enabled() const { return !cert_file.empty(); }
};

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;  // 0: any free port
  Limits limits;
  TlsFiles tls;
  int io_threads = 2;
  int handler_threads = 16;
  std::string static_dir;  // GET of any other path serves files from here ("" : none)
};

struct ServerStats {
  int64_t connections_open = 0;
  uint64_t connections_accepted = 0;
  uint64_t connections_refused = 0;  // over max_connections
  uint64_t timeouts = 0;             // head, body, idle or write deadline passed
  uint64_t clients_gone = 0;         // a pending deferred or streamed body whose client went away
};

using Handler = std::function<void(Request&, Response&)>;
// Called on an I/O thread once a request's head is read, before its body: returns false to answer
// with `response` at once (and close), or true to read the body and route the request.
using HeadFilter = std::function<bool(Request&, Response&)>;
// Called once an exchange is over: its response written, or its client gone (complete false).
using ExchangeEnd = std::function<void(const Request&, const Response&, bool complete)>;
// The body of an error the layer itself answers (404, 413, 431, 500, 503).
using ErrorBody = std::function<void(Response&, int status, const std::string& message)>;

class Server {
 public:
  explicit Server(ServerOptions options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  void route(const std::string& method, const std::string& path, Handler handler);
  // Every path under `prefix` (non-empty rest, no '/' in it unless `nested`) goes to `handler`,
  // the rest in Request::path_tail.
  void route_prefix(const std::string& method, const std::string& prefix, Handler handler, bool nested = false);
  // Every request of `method` no other route takes (e.g. CORS preflights: OPTIONS on any path).
  void route_method(const std::string& method, Handler handler);
  void on_head(HeadFilter filter);
  void on_exchange_end(ExchangeEnd callback);
  void on_error_body(ErrorBody make);

  // Binds and listens (SO_REUSEADDR, never SO_REUSEPORT: a busy port is an error that says
  // "address in use"), and loads the TLS certificate when configured.
  Status bind();
  int port() const;
  // Serves on the calling thread and io_threads - 1 more until stop(), then until every request
  // in flight has been answered.
  void serve();
  // Stops accepting and closes idle connections; exchanges in flight run to their end. Any thread.
  void stop();
  ServerStats stats() const;

  struct Core;

 private:
  std::unique_ptr<Core> core_;
};

}  // namespace mnemo::http

// What a handler of the HTTP layer (http/server.h) sees and answers: a request whose head and body
// have been read within their limits, and a response that is either a whole body or a body source.
//
// A body source is how a response waits for the engine without holding a thread: the connection
// pulls what is ready, and the source wakes it (from the engine's thread) when there is more.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mnemo::http {

struct Header {
  std::string name;
  std::string value;
};

struct Request {
  std::string method;
  std::string target;     // as sent: path, then '?' and the query
  std::string path;       // the target up to '?'
  std::string query;      // after '?' ("" if none)
  std::string path_tail;  // for a prefix route: what follows the prefix
  std::vector<Header> headers;
  std::string body;
  std::string remote_address;
  // The application's state for this exchange (set when its head is admitted, read by its
  // handler and when it ends).
  std::shared_ptr<void> context;
  // For a handler that waits (on a handler thread): whether the client has closed its side since.
  // Set while the handler runs; cheap (one system call or two).
  std::function<bool()> client_gone;

  // The first header of that name, compared without case ("" if there is none).
  std::string header(std::string_view name) const;
  bool has_header(std::string_view name) const;
  // A query parameter, percent-decoded (nullopt if absent).
  std::optional<std::string> query_param(std::string_view name) const;
  // An unsigned decimal query parameter into `out` (`fallback` when absent); false when it is
  // malformed or above `max`.
  bool query_number(std::string_view name, uint64_t fallback, uint64_t max, uint64_t& out) const;
};

// The head of a response whose source says it later (Response::answer_later).
struct ResponseHead {
  int status = 200;
  std::string content_type;
  std::vector<Header> headers;
  bool chunked = false;  // streamed as it comes; else sent whole, with its length, once complete
};

class BodySource {
 public:
  virtual ~BodySource() = default;
  // Appends what is ready to `out`, never blocking; true once the body is complete.
  virtual bool pull(std::string& out) = 0;
  // `wake` is to be called, from any thread, whenever pull may have more: after it is set, it may
  // be called at once, and more often than needed. An empty function detaches it: once this
  // returns, the previous one is not called again.
  virtual void on_ready(std::function<void()> wake) = 0;
  // The client went away or a write failed: stop producing (and free what it holds).
  virtual void cancel() = 0;
  // The status of a deferred (whole) body, asked once it is complete.
  virtual int status() const { return 200; }
  // For a response answered later: its head, once known (nullopt until then; pull is not called
  // before it is). A source that knows it wakes the connection as for more body.
  virtual std::optional<ResponseHead> head() { return std::nullopt; }
  // Asked once it is complete: true if the body broke off (a relayed reply whose source died).
  // A chunked body then ends by closing the connection without its last chunk, so the client
  // sees a broken reply rather than a whole one.
  virtual bool failed() const { return false; }
};

struct Response {
  int status = 200;
  std::string content_type;
  std::string body;
  std::vector<Header> headers;
  // A body produced later: streamed with chunked transfer coding as it comes (chunked), or sent
  // whole with its length once complete (not chunked). Either way, the client going away
  // cancels it.
  std::shared_ptr<BodySource> source;
  bool chunked = false;
  bool late_head = false;  // the source says the status, headers and whether it is chunked (head())
  bool close = false;  // close the connection after this response

  void set_content(std::string content, std::string type) {
    body = std::move(content);
    content_type = std::move(type);
  }
  void set_header(std::string name, std::string value) { headers.push_back({std::move(name), std::move(value)}); }
  void remove_header(std::string_view name) {
    std::erase_if(headers, [&](const Header& h) { return h.name == name; });
  }
  void stream(std::string type, std::shared_ptr<BodySource> body_source) {
    content_type = std::move(type);
    source = std::move(body_source);
    chunked = true;
  }
  void defer(std::string type, std::shared_ptr<BodySource> body_source) {
    content_type = std::move(type);
    source = std::move(body_source);
    chunked = false;
  }
  // Everything later: the head comes from the source (its headers after those set here), then
  // the body as that head says. A proxy's response, whose instance has not answered yet.
  void answer_later(std::shared_ptr<BodySource> body_source) {
    source = std::move(body_source);
    late_head = true;
  }
};

// Percent-decoding of a query component ('+' is a space); malformed escapes are kept as they are.
std::string percent_decode(std::string_view text);

}  // namespace mnemo::http

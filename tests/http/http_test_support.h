// Helpers for the http::Server tests: a server on its own thread, a raw-socket client (for what
// httplib cannot express: dripped heads, hand-written chunks, pipelining, a client that leaves)
// and a body source fed from the test thread.
#pragma once

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "http/server.h"

namespace mnemo::http::testing {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

inline ServerOptions test_options() {
  ServerOptions options;
  options.port = 0;
  options.handler_threads = 4;
  return options;
}

// Polls `condition` until it holds or `timeout` passes.
inline bool wait_until(const std::function<bool()>& condition, milliseconds timeout = milliseconds(2000)) {
  const auto deadline = Clock::now() + timeout;
  while (!condition()) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(milliseconds(5));
  }
  return true;
}

inline int64_t ms_since(Clock::time_point start) {
  return std::chrono::duration_cast<milliseconds>(Clock::now() - start).count();
}

// An http::Server bound to 127.0.0.1:<any port>, serving on its own thread once start() is called
// (routes go in before). Destroying it stops it and joins the thread.
class TestServer {
 public:
  explicit TestServer(ServerOptions options = test_options()) : server(std::move(options)) {}
  ~TestServer() { stop_and_join(); }

  void start() {
    const Status bound = server.bind();
    ASSERT_TRUE(bound.ok()) << bound.error().message();
    ASSERT_GT(server.port(), 0);
    std::promise<void> done;
    served_ = done.get_future();
    thread_ = std::thread([this, done = std::move(done)]() mutable {
      server.serve();
      done.set_value();
    });
  }
  int port() const { return server.port(); }
  // Whether serve() has returned within `timeout`.
  bool served_within(milliseconds timeout) { return served_.wait_for(timeout) == std::future_status::ready; }
  void stop_and_join() {
    if (!thread_.joinable()) return;
    server.stop();
    thread_.join();
  }

  Server server;

 private:
  std::thread thread_;
  std::future<void> served_;
};

struct RawResponse {
  int status = 0;
  std::map<std::string, std::string> headers;  // names in lower case
  std::string body;                            // de-chunked
  std::string header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? std::string() : it->second;
  }
};

// A blocking TCP client on a raw socket, every read bounded by a timeout.
class RawClient {
 public:
  explicit RawClient(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
    const int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  ~RawClient() { close(); }
  RawClient(const RawClient&) = delete;
  RawClient& operator=(const RawClient&) = delete;

  bool connected() const { return connected_; }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  bool send(const std::string& data) {
    size_t sent = 0;
    while (sent < data.size()) {
      const ssize_t n = ::send(fd_, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return false;
      sent += static_cast<size_t>(n);
    }
    return true;
  }
  // One read into the buffer: > 0 bytes read, 0 the peer closed, -1 timeout, -2 an error (reset).
  int read_some(milliseconds timeout) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(timeout.count())) <= 0) return -1;
    char data[16384];
    const ssize_t n = ::recv(fd_, data, sizeof data, 0);
    if (n < 0) return -2;
    buffer_.append(data, static_cast<size_t>(n));
    return static_cast<int>(n);
  }
  // Whether the server closes the connection (EOF or reset) within `timeout`; data is kept.
  bool closed_within(milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    while (Clock::now() < deadline) {
      const int n = read_some(std::chrono::duration_cast<milliseconds>(deadline - Clock::now()) + milliseconds(1));
      if (n == 0 || n == -2) return true;
    }
    return false;
  }
  // Reads until `predicate(buffer)` holds; false on timeout or close.
  bool read_until(const std::function<bool(const std::string&)>& predicate, milliseconds timeout = milliseconds(3000)) {
    const auto deadline = Clock::now() + timeout;
    while (!predicate(buffer_)) {
      if (Clock::now() >= deadline) return false;
      if (read_some(std::chrono::duration_cast<milliseconds>(deadline - Clock::now()) + milliseconds(1)) <= 0) {
        return predicate(buffer_);
      }
    }
    return true;
  }
  // Reads one whole response (Content-Length or chunked) and removes it from the buffer.
  std::optional<RawResponse> read_response(milliseconds timeout = milliseconds(3000)) {
    std::optional<RawResponse> response;
    size_t past = 0;
    read_until([&](const std::string& b) { return (response = parse(b, past)).has_value(); }, timeout);
    if (response) buffer_.erase(0, past);
    return response;
  }
  // The decoded body of a chunked response received so far (head must be complete).
  std::string chunked_body_so_far() const {
    const size_t end = buffer_.find("\r\n\r\n");
    if (end == std::string::npos) return {};
    std::string body;
    decode_chunks(buffer_, end + 4, body);
    return body;
  }
  std::string& buffer() { return buffer_; }
  int fd() const { return fd_; }

 private:
  // Decodes chunks from `pos`; returns the offset past the last chunk if complete, else npos.
  static size_t decode_chunks(const std::string& b, size_t pos, std::string& body) {
    for (;;) {
      const size_t eol = b.find("\r\n", pos);
      if (eol == std::string::npos) return std::string::npos;
      const size_t size = std::stoul(b.substr(pos, eol - pos), nullptr, 16);
      if (size == 0) return b.size() >= eol + 4 ? eol + 4 : std::string::npos;
      if (b.size() < eol + 2 + size + 2) return std::string::npos;
      body.append(b, eol + 2, size);
      pos = eol + 2 + size + 2;
    }
  }
  static std::optional<RawResponse> parse(const std::string& b, size_t& past) {
    const size_t end = b.find("\r\n\r\n");
    if (end == std::string::npos || b.compare(0, 5, "HTTP/") != 0) return std::nullopt;
    RawResponse r;
    r.status = std::atoi(b.c_str() + b.find(' ') + 1);
    size_t line = b.find("\r\n") + 2;
    while (line < end) {
      const size_t eol = b.find("\r\n", line);
      const size_t colon = b.find(':', line);
      std::string name = b.substr(line, colon - line);
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      std::string value = b.substr(colon + 1, eol - colon - 1);
      value.erase(0, value.find_first_not_of(' '));
      r.headers[name] = value;
      line = eol + 2;
    }
    past = end + 4;
    if (r.header("transfer-encoding") == "chunked") {
      past = decode_chunks(b, end + 4, r.body);
      if (past == std::string::npos) return std::nullopt;
    } else if (!r.header("content-length").empty()) {
      const size_t length = std::stoul(r.header("content-length"));
      if (b.size() < end + 4 + length) return std::nullopt;
      r.body = b.substr(end + 4, length);
      past = end + 4 + length;
    }
    return r;
  }

  int fd_ = -1;
  bool connected_ = false;
  std::string buffer_;
};

inline std::string get_request(const std::string& target, const std::string& extra_headers = "") {
  return "GET " + target + " HTTP/1.1\r\nHost: localhost\r\n" + extra_headers + "\r\n";
}

// A body source the test feeds from its own thread; it records what the server asks of it.
class TestSource : public BodySource {
 public:
  explicit TestSource(int status = 200) : status_(status) {}
  void push(const std::string& data, bool finish = false) {
    std::lock_guard lock(mutex_);
    pending_ += data;
    done_ = done_ || finish;
    // Called under the lock, so that once on_ready({}) returns the old wake is never called.
    if (wake_) wake_();
  }
  bool pull(std::string& out) override {
    std::lock_guard lock(mutex_);
    out += pending_;
    pending_.clear();
    return done_;
  }
  void on_ready(std::function<void()> wake) override {
    std::lock_guard lock(mutex_);
    wake_ = std::move(wake);
    if (wake_) {
      attached_ = true;
      wake_();  // allowed: "it may be called at once"
    } else {
      detached_ = true;
    }
  }
  void cancel() override { ++cancels; }
  int status() const override { return status_; }

  bool attached() const { std::lock_guard lock(mutex_); return attached_; }
  bool detached() const { std::lock_guard lock(mutex_); return detached_; }
  std::atomic<int> cancels{0};

 private:
  const int status_;
  mutable std::mutex mutex_;
  std::function<void()> wake_;
  std::string pending_;
  bool done_ = false;
  bool attached_ = false;
  bool detached_ = false;
};

// The sources the handlers made, for the test thread to feed.
class SourceBox {
 public:
  std::shared_ptr<TestSource> make(int status = 200) {
    auto source = std::make_shared<TestSource>(status);
    std::lock_guard lock(mutex_);
    sources_.push_back(source);
    return source;
  }
  // The n-th source made (0-based), once its connection has attached to it.
  std::shared_ptr<TestSource> wait_attached(size_t n, milliseconds timeout = milliseconds(2000)) {
    std::shared_ptr<TestSource> found;
    wait_until(
        [&] {
          std::lock_guard lock(mutex_);
          if (sources_.size() > n && sources_[n]->attached()) found = sources_[n];
          return found != nullptr;
        },
        timeout);
    return found;
  }

 private:
  std::mutex mutex_;
  std::vector<std::shared_ptr<TestSource>> sources_;
};

// GET /stream: a chunked body from a TestSource; GET /defer?status=N: a deferred one.
inline void route_sources(Server& server, SourceBox& box) {
  server.route("GET", "/stream", [&box](Request&, Response& res) {
    res.set_header("X-Stream", "yes");
    res.stream("text/event-stream", box.make());
  });
  server.route("GET", "/defer", [&box](Request& req, Response& res) {
    res.defer("application/json", box.make(std::stoi(req.query_param("status").value_or("200"))));
  });
}

}  // namespace mnemo::http::testing

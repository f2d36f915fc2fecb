// One client connection of http::Server (internal to src/http), over plain TCP or TLS. All of its
// work runs on its strand; a handler runs on a handler thread while the connection waits.
//
//   [TLS handshake] -> read head (deadline) -> head filter -> read body (deadline, limit)
//     -> handler (handler thread) -> whole response | deferred body | chunked stream
//     -> next request on the same connection (idle deadline), or close
#pragma once

#include <cerrno>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <fmt/format.h>

#include "http/server_core.h"

namespace mnemo::http {

namespace beast = boost::beast;
namespace bhttp = boost::beast::http;

using TlsStream = beast::ssl_stream<beast::tcp_stream>;

// The request's own words for its failure, never a raw exception text to the client.
void serve_static(const std::string& dir, const Request& request, Response& response, const Server::Core& core);

template <class Stream>
class Connection final : public ConnectionBase, public std::enable_shared_from_this<Connection<Stream>> {
 public:
  Connection(Server::Core& core, Stream stream, std::string remote)
      : core_(core), stream_(std::move(stream)), remote_(std::move(remote)) {}

  ~Connection() override {
    if (response_.source) response_.source->on_ready({});
    core_.remove_connection(this);
    if (core_.connections_open.fetch_sub(1) == 1 && core_.stopping && !core_.destroying) {
      boost::asio::post(*core_.io, [&core = core_] { core.release_work(); });
    }
  }

  void start() {
    core_.add_connection(this, this->weak_from_this());
    if constexpr (std::is_same_v<Stream, TlsStream>) {
      tcp().expires_after(core_.options.limits.header_timeout);
      stream_.async_handshake(boost::asio::ssl::stream_base::server,
                              [self = this->shared_from_this()](beast::error_code ec) {
                                if (ec) return self->close_after(ec);
                                self->read_head();
                              });
    } else {
      read_head();
    }
  }

  void close_if_idle() override {
    boost::asio::post(stream_.get_executor(), [weak = this->weak_from_this()] {
      if (auto self = weak.lock(); self && self->phase_ == Phase::kReadingHead) self->close();
    });
  }

 private:
  enum class Phase { kReadingHead, kReadingBody, kHandling, kResponding, kClosed };

  beast::tcp_stream& tcp() { return beast::get_lowest_layer(stream_); }
  boost::asio::ip::tcp::socket& socket() { return tcp().socket(); }

  void read_head() {
    if (core_.stopping) return close();
    phase_ = Phase::kReadingHead;
    parser_.emplace();
    parser_->header_limit(static_cast<std::uint32_t>(core_.options.limits.max_header_bytes));
    parser_->body_limit(core_.options.limits.max_body_bytes);
    tcp().expires_after(first_request_ ? core_.options.limits.header_timeout : core_.options.limits.idle_timeout);
    bhttp::async_read_header(stream_, buffer_, *parser_, [self = this->shared_from_this()](beast::error_code ec, std::size_t) {
      self->on_head(ec);
    });
  }

  void on_head(beast::error_code ec) {
    if (ec == bhttp::error::header_limit) {
      return answer_error(431, fmt::format("the request head is larger than {} bytes", core_.options.limits.max_header_bytes));
    }
    if (ec == bhttp::error::body_limit) {  // a Content-Length over the limit is known with the head
      return answer_error(413, fmt::format("the request body is larger than {} bytes", core_.options.limits.max_body_bytes));
    }
    if (ec) return refuse_malformed(ec);
    first_request_ = false;
    tcp().expires_never();
    const auto& head = parser_->get();
    size_t count = 0;
    for (auto it = head.begin(); it != head.end(); ++it) ++count;
    request_ = Request{};
    response_ = Response{};
    exchange_open_ = true;
    version_ = head.version();
    keep_alive_ = head.keep_alive();
    if (count > core_.options.limits.max_header_count) {
      return answer_error(431, fmt::format("more than {} header fields", core_.options.limits.max_header_count));
    }
    request_.method = std::string(head.method_string());
    request_.target = std::string(head.target());
    const size_t question = request_.target.find('?');
    request_.path = request_.target.substr(0, question);
    if (question != std::string::npos) request_.query = request_.target.substr(question + 1);
    request_.remote_address = remote_;
    request_.headers.reserve(count);
    for (const auto& field : head) request_.headers.push_back({std::string(field.name_string()), std::string(field.value())});
    if (core_.head_filter && !core_.head_filter(request_, response_)) {
      // Refused before its body: the unread body would be read as the next request.
      response_.close = true;
      return write_whole();
    }
    if (beast::iequals(head[bhttp::field::expect], "100-continue") && !parser_->is_done()) {
      continue_.emplace(bhttp::status::continue_, version_);
      tcp().expires_after(core_.options.limits.write_timeout);
      return bhttp::async_write(stream_, *continue_, [self = this->shared_from_this()](beast::error_code e, std::size_t) {
        if (e) return self->close_after(e);
        self->read_body();
      });
    }
    read_body();
  }

  void read_body() {
    phase_ = Phase::kReadingBody;
    if (parser_->is_done()) return dispatch();
    tcp().expires_after(core_.options.limits.body_timeout);
    bhttp::async_read(stream_, buffer_, *parser_, [self = this->shared_from_this()](beast::error_code ec, std::size_t) {
      if (ec == bhttp::error::body_limit) {
        return self->answer_error(413, fmt::format("the request body is larger than {} bytes", self->core_.options.limits.max_body_bytes));
      }
      if (ec) return self->refuse_malformed(ec);
      self->dispatch();
    });
  }

  void dispatch() {
    tcp().expires_never();
    phase_ = Phase::kHandling;
    request_.body = std::move(parser_->get().body());
    parser_.reset();
    const Route* route = core_.find_route(request_);
    if (route == nullptr && (request_.method != "GET" || core_.options.static_dir.empty())) {
      return answer_error(404, "no route for " + request_.method + " " + request_.path, /*close=*/false);
    }
    const Handler* handler = route != nullptr ? &route->handler : nullptr;
    // The socket stays open while the handler runs: nothing else reads, writes or closes it.
    request_.client_gone = [fd = socket().native_handle()] { return peer_gone(fd) == PeerState::kGone; };
    boost::asio::post(*core_.handlers, [self = this->shared_from_this(), handler] {
      self->run_handler(handler);
      boost::asio::post(self->stream_.get_executor(), [self] { self->respond(); });
    });
  }

  // On a handler thread: the connection does not touch request_ or response_ meanwhile.
  void run_handler(const Handler* handler) {
    try {
      if (handler != nullptr) {
        (*handler)(request_, response_);
      } else {
        serve_static(core_.options.static_dir, request_, response_, core_);
      }
    } catch (const std::exception& e) {
      // A bug, not the client's fault: logged with its text, answered without it.
      std::fprintf(stderr, "mnemo: internal error serving %s %s: %s\n", request_.method.c_str(), request_.path.c_str(), e.what());
      response_ = Response{};
      core_.error_response(response_, 500, "internal error");
    } catch (...) {
      // Anything else thrown would escape into the handler pool's thread, which calls
      // std::terminate: the whole server would go down with one request.
      std::fprintf(stderr, "mnemo: internal error serving %s %s: non-standard exception\n", request_.method.c_str(),
                   request_.path.c_str());
      response_ = Response{};
      core_.error_response(response_, 500, "internal error");
    }
  }

  void respond() {
    if (phase_ == Phase::kClosed) return finish_exchange(false);
    phase_ = Phase::kResponding;
    if (!response_.source) return write_whole();
    watch_client();
    response_.source->on_ready([weak = this->weak_from_this(), executor = stream_.get_executor()] {
      boost::asio::post(executor, [weak] {
        if (auto self = weak.lock()) self->pump();
      });
    });
    if (response_.late_head || !response_.chunked) return pump();
    write_stream_head();
  }

  void write_stream_head() {
    stream_head_.emplace(static_cast<bhttp::status>(response_.status), version_);
    stream_head_->set(bhttp::field::content_type, response_.content_type);
    for (const Header& h : response_.headers) stream_head_->set(h.name, h.value);
    stream_head_->chunked(true);
    stream_head_->keep_alive(keep_alive());
    serializer_.emplace(*stream_head_);
    writing_ = true;
    tcp().expires_after(core_.options.limits.write_timeout);
    bhttp::async_write_header(stream_, *serializer_, [self = this->shared_from_this()](beast::error_code ec, std::size_t) {
      self->writing_ = false;
      if (ec) return self->client_gone(ec);
      self->tcp().expires_never();
      self->pump();
    });
  }

  // Takes what the source has ready and writes it (chunked), or keeps it for the whole body.
  void pump() {
    if (phase_ != Phase::kResponding || writing_ || source_complete_ || !response_.source) return;
    if (response_.late_head && !head_known_) {
      std::optional<ResponseHead> head = response_.source->head();
      if (!head) return;
      head_known_ = true;
      response_.status = head->status;
      response_.content_type = std::move(head->content_type);
      for (Header& h : head->headers) response_.headers.push_back(std::move(h));
      response_.chunked = head->chunked;
      if (response_.chunked) return write_stream_head();
    }
    std::string ready;
    source_complete_ = response_.source->pull(ready);
    if (!response_.chunked) {
      deferred_body_ += ready;
      if (!source_complete_) return;
      if (!response_.late_head) response_.status = response_.source->status();
      response_.body = std::move(deferred_body_);
      deferred_body_.clear();
      return write_whole();
    }
    if (ready.empty() && !source_complete_) return;
    chunk_ = std::move(ready);
    write_chunk();
  }

  void write_chunk() {
    writing_ = true;
    tcp().expires_after(core_.options.limits.write_timeout);
    auto on_written = [self = this->shared_from_this()](beast::error_code ec, std::size_t) {
      self->writing_ = false;
      if (ec) return self->client_gone(ec);
      self->tcp().expires_never();
      if (!self->chunk_.empty()) {
        self->chunk_.clear();
        return self->source_complete_ ? self->write_chunk() : self->pump();
      }
      self->end_exchange();
    };
    if (!chunk_.empty()) {
      boost::asio::async_write(stream_, bhttp::make_chunk(boost::asio::buffer(chunk_)), std::move(on_written));
    } else if (response_.source && response_.source->failed()) {
      // A body that broke off: no last chunk, the connection closes (the client sees it broken).
      writing_ = false;
      finish_exchange(false);
      close();
    } else {
      boost::asio::async_write(stream_, bhttp::make_chunk_last(), std::move(on_written));
    }
  }

  void write_whole() {
    phase_ = Phase::kResponding;
    whole_.emplace();
    whole_->version(version_);
    whole_->result(static_cast<unsigned>(response_.status));
    if (!response_.content_type.empty()) whole_->set(bhttp::field::content_type, response_.content_type);
    for (const Header& h : response_.headers) whole_->set(h.name, h.value);
    whole_->keep_alive(keep_alive());
    whole_->body() = response_.body;
    whole_->prepare_payload();
    writing_ = true;
    tcp().expires_after(core_.options.limits.write_timeout);
    bhttp::async_write(stream_, *whole_, [self = this->shared_from_this()](beast::error_code ec, std::size_t) {
      self->writing_ = false;
      if (ec) return self->client_gone(ec);
      self->tcp().expires_never();
      self->end_exchange();
    });
  }

  // The response is written: the next request, or close.
  void end_exchange() {
    const bool again = keep_alive();
    finish_exchange(true);
    whole_.reset();
    serializer_.reset();
    stream_head_.reset();
    if (!again) return close();
    read_head();
  }

  bool keep_alive() const { return keep_alive_ && !response_.close && !core_.stopping; }

  // While a body is pending, a readable socket with nothing to read is a client that left.
  void watch_client() {
    const uint64_t generation = ++watch_generation_;
    watching_ = true;
    socket().async_wait(boost::asio::ip::tcp::socket::wait_read,
                        [self = this->shared_from_this(), generation](beast::error_code ec) {
                          if (generation == self->watch_generation_) self->watching_ = false;
                          if (ec || generation != self->watch_generation_ || self->phase_ != Phase::kResponding) return;
                          self->check_client(generation);
                        });
  }

  void check_client(uint64_t generation) {
    switch (peer_gone(socket().native_handle())) {
      case PeerState::kGone:
        return client_gone(beast::error_code(boost::asio::error::eof));
      case PeerState::kQuiet:
        return watch_client();
      case PeerState::kBytesWaiting:
        break;
    }
    // Bytes wait unread: a pipelined request, or TLS records (a close_notify looks like any other
    // record under TLS 1.3). peer_gone looks behind them until the answer is done (the socket
    // stays readable meanwhile, so a timer paces it).
    if (!watch_timer_) watch_timer_.emplace(stream_.get_executor());
    watching_ = true;
    watch_timer_->expires_after(std::chrono::milliseconds(250));
    watch_timer_->async_wait([self = this->shared_from_this(), generation](beast::error_code ec) {
      if (generation == self->watch_generation_) self->watching_ = false;
      if (ec || generation != self->watch_generation_ || self->phase_ != Phase::kResponding) return;
      self->check_client(generation);
    });
  }

  enum class PeerState { kQuiet, kBytesWaiting, kGone };
  // Whether the client of `fd` has gone: it closed (end of stream, or an error), or bytes wait
  // unread and behind them the kernel has seen its close (CLOSE_WAIT).
  static PeerState peer_gone(int fd) {
    char byte = 0;
    const ssize_t n = ::recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) return PeerState::kGone;
    if (n < 0) return PeerState::kQuiet;
    tcp_info info{};
    socklen_t length = sizeof(info);
    const bool closed = ::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &length) == 0 && info.tcpi_state == TCP_CLOSE_WAIT;
    return closed ? PeerState::kGone : PeerState::kBytesWaiting;
  }

  void client_gone(beast::error_code ec) {
    if (ec == beast::error::timeout) ++core_.timeouts;
    // finish_exchange(false) cancels the source: cancelling it here too called cancel() twice.
    if (phase_ == Phase::kResponding && exchange_open_) ++core_.clients_gone;
    finish_exchange(false);
    close();
  }

  void finish_exchange(bool complete) {
    ++watch_generation_;
    if (watching_) {
      // No other operation is pending on the socket here: this ends the watch only.
      watching_ = false;
      beast::error_code ignored;
      socket().cancel(ignored);
      if (watch_timer_) watch_timer_->cancel();
    }
    if (response_.source) {
      response_.source->on_ready({});
      if (!complete) response_.source->cancel();
    }
    if (exchange_open_) {
      exchange_open_ = false;
      if (core_.exchange_end) core_.exchange_end(request_, response_, complete);
    }
    // Releases what the source holds (the request's slot among those in flight).
    response_.source.reset();
    source_complete_ = false;
    head_known_ = false;
    chunk_.clear();
  }

  void answer_error(int status, const std::string& message, bool close = true) {
    response_ = Response{};
    core_.error_response(response_, status, message);
    response_.close = close;
    write_whole();
  }

  void refuse_malformed(beast::error_code ec) {
    // A timeout is counted by close_after, below (counting it here too counted each one twice).
    // A head or body that is not HTTP gets a 400; a client that closed, or stalled, just goes.
    if (ec.category() == bhttp::make_error_code(bhttp::error::bad_target).category() && ec != bhttp::error::end_of_stream &&
        ec != bhttp::error::partial_message) {
      if (!exchange_open_) {
        request_ = Request{};
        exchange_open_ = true;
      }
      version_ = 11;
      return answer_error(400, "malformed HTTP request: " + ec.message());
    }
    close_after(ec);
  }

  void close_after(beast::error_code ec) {
    if (ec == beast::error::timeout) ++core_.timeouts;
    finish_exchange(false);
    close();
  }

  void close() {
    if (phase_ == Phase::kClosed) return;
    phase_ = Phase::kClosed;
    beast::error_code ignored;
    socket().shutdown(boost::asio::ip::tcp::socket::shutdown_both, ignored);
    socket().close(ignored);
  }

  Server::Core& core_;
  Stream stream_;
  std::string remote_;
  beast::flat_buffer buffer_;
  Phase phase_ = Phase::kReadingHead;
  bool first_request_ = true;
  bool keep_alive_ = false;
  unsigned version_ = 11;
  bool exchange_open_ = false;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  Request request_;
  Response response_;
  std::optional<bhttp::response<bhttp::empty_body>> continue_;
  std::optional<bhttp::response<bhttp::string_body>> whole_;
  std::optional<bhttp::response<bhttp::empty_body>> stream_head_;
  std::optional<bhttp::response_serializer<bhttp::empty_body>> serializer_;
  std::string deferred_body_;
  std::string chunk_;
  bool writing_ = false;
  bool source_complete_ = false;
  bool head_known_ = false;  // of a late-head response
  uint64_t watch_generation_ = 0;
  bool watching_ = false;
  std::optional<boost::asio::steady_timer> watch_timer_;  // paces check_client while bytes wait unread
};

}  // namespace mnemo::http

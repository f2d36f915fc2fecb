#include "http/client.h"

#include <array>
#include <cstdint>
#include <limits>
#include <optional>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <fmt/format.h>

#include "util/net_address.h"

namespace mnemo::http {
namespace {

namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using boost::asio::ip::tcp;

constexpr size_t kReadBufferBytes = 16 << 10;

class BeastCall final : public ClientCall, public std::enable_shared_from_this<BeastCall> {
 public:
  BeastCall(boost::asio::any_io_executor executor, ClientRequest request, ClientTimeouts timeouts, ClientEvents events)
      : executor_(std::move(executor)),
        request_(std::move(request)),
        timeouts_(timeouts),
        events_(std::move(events)),
        resolver_(executor_),
        stream_(executor_) {}

  void begin() {
    auto url = parse_http_url(request_.address, std::nullopt, /*bare_is_http=*/true);
    if (!url.ok() || url->tls || (!url->path.empty() && url->path != "/")) {
      return end(CallEnd::kUnreached, fmt::format("address \"{}\" is not http://host:port", request_.address));
    }
    host_field_ = url->authority;
    resolver_.async_resolve(url->address.host, std::to_string(url->address.port),
                            [self = shared_from_this()](beast::error_code ec, tcp::resolver::results_type results) {
                              if (ec) return self->fail("resolving the address", ec);
                              self->connect(results);
                            });
  }

  void pause() override { paused_ = true; }

  void resume() override {
    paused_ = false;
    if (waiting_for_resume_) {
      waiting_for_resume_ = false;
      read_body();
    }
  }

  void stop() override {
    boost::asio::post(executor_, [self = shared_from_this()] {
      if (self->ended_) return;
      self->stopped_ = true;
      beast::error_code ignored;
      self->resolver_.cancel();
      self->stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
      self->stream_.socket().close(ignored);
      // A call paused between reads has no operation to fail: it ends here.
      if (self->waiting_for_resume_) self->end(CallEnd::kBroken, "stopped");
    });
  }

 private:
  void connect(const tcp::resolver::results_type& results) {
    if (stopped_) return end(head_seen_ ? CallEnd::kBroken : CallEnd::kUnreached, "stopped");
    stream_.expires_after(timeouts_.connect);
    stream_.async_connect(results, [self = shared_from_this()](beast::error_code ec, const tcp::endpoint&) {
      if (ec) return self->fail("connecting", ec);
      self->write_request();
    });
  }

  void write_request() {
    message_.version(11);
    const bhttp::verb verb = bhttp::string_to_verb(request_.method);
    if (verb == bhttp::verb::unknown) return end(CallEnd::kUnreached, "unknown method " + request_.method);
    message_.method(verb);
    message_.target(request_.target);
    message_.set(bhttp::field::host, host_field_);
    for (const Header& h : request_.headers) message_.set(h.name, h.value);
    if (!request_.body.empty()) message_.set(bhttp::field::content_type, "application/json");
    message_.body() = std::move(request_.body);
    message_.keep_alive(false);
    message_.prepare_payload();
    stream_.expires_after(timeouts_.write);
    bhttp::async_write(stream_, message_, [self = shared_from_this()](beast::error_code ec, std::size_t) {
      if (ec) return self->fail("sending the request", ec);
      self->message_ = {};
      self->read_head();
    });
  }

  void read_head() {
    parser_.emplace();
    parser_->body_limit(std::numeric_limits<std::uint64_t>::max());  // a stream runs as long as its reply (a trusted peer's)
    stream_.expires_after(timeouts_.read);
    bhttp::async_read_header(stream_, buffer_, *parser_, [self = shared_from_this()](beast::error_code ec, std::size_t) {
      if (ec) return self->fail("waiting for the reply", ec);
      self->on_head();
    });
  }

  void on_head() {
    head_seen_ = true;
    ReplyHead head;
    const auto& message = parser_->get();
    head.status = static_cast<int>(message.result_int());
    for (const auto& field : message) head.headers.push_back({std::string(field.name_string()), std::string(field.value())});
    if (events_.on_head) events_.on_head(head);
    if (ended_) return;
    read_body();
  }

  void read_body() {
    if (ended_) return;
    if (stopped_) return end(CallEnd::kBroken, "stopped");
    if (parser_->is_done()) return end(CallEnd::kComplete, "");
    if (paused_) {
      waiting_for_resume_ = true;
      return;
    }
    parser_->get().body().data = read_buffer_.data();
    parser_->get().body().size = read_buffer_.size();
    stream_.expires_after(timeouts_.read);
    bhttp::async_read_some(stream_, buffer_, *parser_, [self = shared_from_this()](beast::error_code ec, std::size_t) {
      if (ec == bhttp::error::need_buffer || (ec && self->parser_->is_done())) ec = {};
      const size_t n = self->read_buffer_.size() - self->parser_->get().body().size;
      if (n > 0 && !self->ended_ && self->events_.on_data) {
        self->events_.on_data(std::string(self->read_buffer_.data(), n));
      }
      if (ec) return self->fail("reading the reply", ec);
      self->read_body();
    });
  }

  void fail(const char* doing, beast::error_code ec) {
    const CallEnd kind = head_seen_ ? CallEnd::kBroken : CallEnd::kUnreached;
    end(kind, stopped_ ? std::string("stopped") : fmt::format("{}: {}", doing, ec.message()));
  }

  void end(CallEnd kind, const std::string& why) {
    if (ended_) return;
    ended_ = true;
    beast::error_code ignored;
    stream_.socket().close(ignored);
    // The events hold their owner: released here, so neither outlives the call's end.
    ClientEvents events = std::move(events_);
    events_ = {};
    if (events.on_end) events.on_end(kind, why);
  }

  boost::asio::any_io_executor executor_;
  ClientRequest request_;
  ClientTimeouts timeouts_;
  ClientEvents events_;
  tcp::resolver resolver_;
  beast::tcp_stream stream_;
  std::string host_field_;
  bhttp::request<bhttp::string_body> message_;
  beast::flat_buffer buffer_;
  std::optional<bhttp::response_parser<bhttp::buffer_body>> parser_;
  std::array<char, kReadBufferBytes> read_buffer_{};
  bool head_seen_ = false;
  bool paused_ = false;
  bool waiting_for_resume_ = false;
  bool stopped_ = false;
  bool ended_ = false;
};

}  // namespace

std::string ReplyHead::header(std::string_view name) const {
  for (const Header& h : headers) {
    if (beast::iequals(h.name, beast::string_view(name.data(), name.size()))) return h.value;
  }
  return "";
}

std::shared_ptr<ClientCall> ClientCall::start(boost::asio::any_io_executor executor, ClientRequest request,
                                              ClientTimeouts timeouts, ClientEvents events) {
  auto call = std::make_shared<BeastCall>(executor, std::move(request), timeouts, std::move(events));
  boost::asio::post(executor, [call] { call->begin(); });
  return call;
}

}  // namespace mnemo::http

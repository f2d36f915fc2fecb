#include "http/server.h"

#include <cerrno>
#include <cstdio>
#include <string>
#include <thread>
#include <utility>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <nlohmann/json.hpp>

#include "http/connection.h"
#include "http/server_core.h"
#include "util/thread_name.h"

namespace mnemo::http {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

Server::Core::Core(ServerOptions server_options)
    : options(std::move(server_options)),
      io(std::make_unique<asio::io_context>(std::max(options.io_threads, 1))),
      accept_strand(asio::make_strand(*io)),
      acceptor(std::make_unique<tcp::acceptor>(*accept_strand)),
      handlers(std::make_unique<asio::thread_pool>(static_cast<size_t>(std::max(options.handler_threads, 1)))),
      accept_retry(std::make_unique<asio::steady_timer>(*accept_strand)) {}

Server::Core::~Core() {
  destroying = true;
  handlers->stop();
  handlers->join();
  handlers.reset();  // queued tasks hold connections: they go while the I/O context is alive
  work.reset();
  accept_retry.reset();
  acceptor.reset();
  accept_strand.reset();  // its implementation unlinks itself from the context's strand service
  io.reset();
}

const Route* Server::Core::find_route(Request& request) const {
  for (const Route& route : routes) {
    if (!route.prefix && !route.every_path && route.method == request.method && route.path == request.path) return &route;
  }
  for (const Route& route : routes) {
    if (route.every_path || !route.prefix || route.method != request.method || request.path.rfind(route.path, 0) != 0) continue;
    std::string tail = request.path.substr(route.path.size());
    if (tail.empty() || (!route.nested && tail.find('/') != std::string::npos)) continue;
    request.path_tail = std::move(tail);
    return &route;
  }
  for (const Route& route : routes) {
    if (route.every_path && route.method == request.method) return &route;
  }
  return nullptr;
}

void Server::Core::error_response(Response& response, int status, const std::string& message) const {
  if (error_body) return error_body(response, status, message);
  response.status = status;
  response.set_content(nlohmann::json{{"error", {{"message", message}}}}.dump(), "application/json");
}

void Server::Core::add_connection(ConnectionBase* connection, std::weak_ptr<ConnectionBase> handle) {
  std::lock_guard lock(registry_mutex);
  registry.emplace(connection, std::move(handle));
}

void Server::Core::release_work() {
  if (!work_released.exchange(true)) work.reset();
}

void Server::Core::remove_connection(ConnectionBase* connection) {
  std::lock_guard lock(registry_mutex);
  registry.erase(connection);
}

void Server::Core::accept() {
  acceptor->async_accept(asio::make_strand(*io), [this](const boost::system::error_code& error, tcp::socket socket) {
    on_accept(error, std::move(socket));
  });
}

void Server::Core::on_accept(const boost::system::error_code& error, tcp::socket socket) {
  if (stopping || !acceptor->is_open()) return;
  if (error) {
    // Out of descriptors (EMFILE) or the like: accepting again at once would spin.
    accept_retry->expires_after(std::chrono::milliseconds(50));
    accept_retry->async_wait([this](const boost::system::error_code& e) {
      if (!e) accept();
    });
    return;
  }
  if (connections_open.load() >= options.limits.max_connections) {
    ++connections_refused;
    // Best effort: a fresh socket's send buffer takes it whole or the client learns from the close.
    (void)::send(socket.native_handle(), busy_reply.data(), busy_reply.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    boost::system::error_code ignored;
    socket.close(ignored);
    return accept();
  }
  ++connections_open;
  ++connections_accepted;
  boost::system::error_code ignored;
  socket.set_option(tcp::no_delay(true), ignored);
  const auto endpoint = socket.remote_endpoint(ignored);
  std::string remote = ignored ? std::string() : endpoint.address().to_string();
  if (tls) {
    std::make_shared<Connection<TlsStream>>(*this, TlsStream(beast::tcp_stream(std::move(socket)), *tls), std::move(remote))->start();
  } else {
    std::make_shared<Connection<beast::tcp_stream>>(*this, beast::tcp_stream(std::move(socket)), std::move(remote))->start();
  }
  accept();
}

Server::Server(ServerOptions options) : core_(std::make_unique<Core>(std::move(options))) {}

Server::~Server() = default;

void Server::route(const std::string& method, const std::string& path, Handler handler) {
  core_->routes.push_back({method, path, false, false, false, std::move(handler)});
}

void Server::route_prefix(const std::string& method, const std::string& prefix, Handler handler, bool nested) {
  core_->routes.push_back({method, prefix, true, false, nested, std::move(handler)});
}

void Server::route_method(const std::string& method, Handler handler) {
  core_->routes.push_back({method, "", false, true, false, std::move(handler)});
}

void Server::on_head(HeadFilter filter) { core_->head_filter = std::move(filter); }
void Server::on_exchange_end(ExchangeEnd callback) { core_->exchange_end = std::move(callback); }
void Server::on_error_body(ErrorBody make) { core_->error_body = std::move(make); }

Status Server::bind() {
  Core& core = *core_;
  const ServerOptions& o = core.options;
  boost::system::error_code ec;
  tcp::resolver resolver(*core.io);
  const auto endpoints = resolver.resolve(o.host, std::to_string(o.port), tcp::resolver::passive, ec);
  if (ec || endpoints.empty()) return make_error("cannot listen on {}:{}: {}", o.host, o.port, ec ? ec.message() : "no address");
  const tcp::endpoint endpoint = endpoints.begin()->endpoint();
  tcp::acceptor& acceptor = *core.acceptor;
  if (acceptor.open(endpoint.protocol(), ec); ec) return make_error("cannot listen on {}:{}: {}", o.host, o.port, ec.message());
  // SO_REUSEADDR only: SO_REUSEPORT would let a second server share the port and take half of
  // its connections.
  acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (acceptor.bind(endpoint, ec); ec) {
    const bool in_use = ec == asio::error::address_in_use;
    return make_error("cannot listen on {}:{}: {}", o.host, o.port, in_use ? "address in use" : ec.message());
  }
  if (acceptor.listen(asio::socket_base::max_listen_connections, ec); ec) {
    return make_error("cannot listen on {}:{}: {}", o.host, o.port, ec.message());
  }
  core.bound_port = acceptor.local_endpoint(ec).port();
  // What a connection over max_connections gets, written once: the error body every other
  // refusal of the layer has, in a whole response (its length computed, never counted by hand).
  Response busy;
  core.error_response(busy, 503, "too many open connections");
  core.busy_reply = fmt::format("HTTP/1.1 503 Service Unavailable\r\nContent-Type: {}\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{}",
                                busy.content_type, busy.body.size(), busy.body);
  if (o.tls.enabled()) {
    core.tls.emplace(asio::ssl::context::tls_server);
    auto& tls = *core.tls;
    tls.set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 | asio::ssl::context::no_sslv3 |
                    asio::ssl::context::no_tlsv1 | asio::ssl::context::no_tlsv1_1 | asio::ssl::context::single_dh_use);
    if (tls.use_certificate_chain_file(o.tls.cert_file, ec); ec) {
      return make_error("TLS certificate {}: {}", o.tls.cert_file, ec.message());
    }
    if (tls.use_private_key_file(o.tls.key_file, asio::ssl::context::pem, ec); ec) {
      return make_error("TLS key {}: {}", o.tls.key_file, ec.message());
    }
  }
  return ok_status();
}

int Server::port() const { return core_->bound_port; }

void Server::serve() {
  Core& core = *core_;
  core.work.emplace(core.io->get_executor());
  asio::post(*core.accept_strand, [&core] {
    if (!core.stopping) core.accept();
  });
  std::vector<std::thread> threads;
  for (int i = 1; i < core.options.io_threads; ++i) {
    threads.emplace_back([&core] {
      name_this_thread("mnemo-http-io");
      core.io->run();
    });
  }
  core.io->run();
  for (auto& t : threads) t.join();
}

void Server::stop() {
  Core& core = *core_;
  if (core.stopping.exchange(true)) return;
  asio::post(*core.accept_strand, [&core] {
    boost::system::error_code ignored;
    core.acceptor->close(ignored);
    core.accept_retry->cancel();
    std::vector<std::shared_ptr<ConnectionBase>> open;
    {
      std::lock_guard lock(core.registry_mutex);
      for (auto& [raw, weak] : core.registry) {
        if (auto connection = weak.lock()) open.push_back(std::move(connection));
      }
    }
    for (auto& connection : open) connection->close_if_idle();
    if (core.connections_open.load() == 0) core.release_work();
  });
}

ServerStats Server::stats() const {
  const Core& core = *core_;
  return ServerStats{core.connections_open.load(), core.connections_accepted.load(), core.connections_refused.load(),
                     core.timeouts.load(), core.clients_gone.load()};
}

}  // namespace mnemo::http

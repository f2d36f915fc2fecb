// The state an http::Server shares with its connections (internal to src/http).
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>

#include "http/server.h"

namespace mnemo::http {

struct Route {
  std::string method;
  std::string path;
  bool prefix = false;
  bool every_path = false;  // the method's fallback, whatever the path
  bool nested = false;      // a prefix route whose tail may hold '/' 
  Handler handler;
};

class ConnectionBase {
 public:
  virtual ~ConnectionBase() = default;
  // Any thread: closes the connection if it is between requests (the server is stopping).
  virtual void close_if_idle() = 0;
};

struct Server::Core {
  explicit Core(ServerOptions server_options);
  ~Core();

  // The route for a request, with its path tail set; nullptr if none.
  const Route* find_route(Request& request) const;
  void error_response(Response& response, int status, const std::string& message) const;
  void accept();
  void on_accept(const boost::system::error_code& error, boost::asio::ip::tcp::socket socket);
  void add_connection(ConnectionBase* connection, std::weak_ptr<ConnectionBase> handle);
  // Lets serve() return once its I/O runs out (stopping, and the last connection gone). Once:
  // stop()'s handler and the last connection's destructor may both get here, on two threads.
  void release_work();
  void remove_connection(ConnectionBase* connection);

  ServerOptions options;
  std::vector<Route> routes;
  HeadFilter head_filter;
  ExchangeEnd exchange_end;
  ErrorBody error_body;

  // Destroyed explicitly, in this order, by ~Core: handlers (whose queued tasks hold
  // connections), the acceptor, then the I/O context (which destroys the connections waiting in
  // it) while everything they touch still exists.
  std::unique_ptr<boost::asio::io_context> io;
  // The acceptor, its retry timer and stop's close run on this strand: with several I/O threads
  // an accept being started and the close would otherwise touch the acceptor at once.
  std::optional<boost::asio::strand<boost::asio::io_context::executor_type>> accept_strand;
  std::unique_ptr<boost::asio::ip::tcp::acceptor> acceptor;
  std::unique_ptr<boost::asio::thread_pool> handlers;
  std::unique_ptr<boost::asio::steady_timer> accept_retry;
  std::optional<boost::asio::ssl::context> tls;
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> work;
  int bound_port = 0;
  std::string busy_reply;  // the raw 503 over max_connections (set by bind)

  std::atomic<bool> stopping{false};
  std::atomic<bool> destroying{false};
  std::atomic<bool> work_released{false};
  std::mutex registry_mutex;
  std::unordered_map<ConnectionBase*, std::weak_ptr<ConnectionBase>> registry;  // guarded by registry_mutex

  std::atomic<int64_t> connections_open{0};
  std::atomic<uint64_t> connections_accepted{0};
  std::atomic<uint64_t> connections_refused{0};
  std::atomic<uint64_t> timeouts{0};
  std::atomic<uint64_t> clients_gone{0};
};

}  // namespace mnemo::http

// The threads under the router's relays (router internals): I/O threads that every upstream call
// and relay runs on, and a small pool for what may block (a reply's bookkeeping talks to etcd and
// to other instances).
#pragma once

#include <chrono>
#include <thread>
#include <vector>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>

#include "router/router.h"
#include "util/thread_name.h"

namespace mnemo::router {

struct Router::UpstreamIo {
  explicit UpstreamIo(int io_threads) : blocking(4) {
    for (int i = 0; i < io_threads; ++i) {
      threads.emplace_back([this] {
        name_this_thread("mnemo-relay-io");
        io.run();
      });
    }
    for (int i = 0; i < 4; ++i) boost::asio::post(blocking, [] { name_this_thread("mnemo-relay-done"); });
  }
  ~UpstreamIo() { shut_down(); }

  // Once no client is left to relay to: the relays end (their calls stop), then the threads.
  void shut_down() {
    if (threads.empty()) return;
    work.reset();
    // Every relay ends once its client is gone; a bound in case one does not.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!io.stopped() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    io.stop();
    for (auto& t : threads) t.join();
    threads.clear();
    blocking.join();
  }

  boost::asio::io_context io;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work{io.get_executor()};
  std::vector<std::thread> threads;
  boost::asio::thread_pool blocking;
};

}  // namespace mnemo::router

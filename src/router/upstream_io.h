// The threads under the router's relays (router internals): I/O threads that every upstream call
// and relay runs on, and a few threads for what may block (a reply's bookkeeping talks to etcd
// and to other instances).
#pragma once

#include <chrono>
#include <thread>
#include <vector>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>

#include "router/router.h"
#include "util/thread_name.h"

namespace mnemo::router {

// An io_context run by threads of one name, until shut down.
class NamedThreads {
 public:
  NamedThreads(int n, const char* name) {
    for (int i = 0; i < n; ++i) {
      threads_.emplace_back([this, name] {
        name_this_thread(name);
        io_.run();
      });
    }
  }
  ~NamedThreads() { shut_down(std::chrono::seconds(10)); }

  boost::asio::io_context& io() { return io_; }

  // Lets the threads end once no work is left, waiting at most `bound` for it (then stops them).
  void shut_down(std::chrono::steady_clock::duration bound) {
    if (threads_.empty()) return;
    work_.reset();
    const auto deadline = std::chrono::steady_clock::now() + bound;
    while (!io_.stopped() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    io_.stop();
    for (auto& t : threads_) t.join();
    threads_.clear();
  }

 private:
  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_{io_.get_executor()};
  std::vector<std::thread> threads_;
};

struct Router::UpstreamIo {
  explicit UpstreamIo(int io_threads) : relays(io_threads, "mnemo-relay-io"), blocking(4, "mnemo-relay-done") {}

  // Once no client is left to relay to: the relays end (their calls stop), then their
  // bookkeeping (which may still post back to the relays' strands: harmless once they are gone).
  ~UpstreamIo() {
    relays.shut_down(std::chrono::seconds(10));
    blocking.shut_down(std::chrono::seconds(10));
  }

  NamedThreads relays;
  NamedThreads blocking;
};

}  // namespace mnemo::router

// Router internals shared by router.cpp and relay.cpp (not for other includers): the relay of
// one request's reply from an instance to its client, and the state of a streamed reply that
// may fail over to another instance.
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_set>

#include "http/message.h"
#include "router/router.h"
#include "router/sse_stitcher.h"

namespace mnemo::router {

// The clock of Relay::first_text_at and of Router::OnDone's first_text_at.
inline double seconds_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// One request's relay from an instance to the client: a thread reads the instance's reply into
// chunks that the client's handler writes out as they come.
struct Router::Upstream {
  std::mutex mutex;
  std::condition_variable changed;
  bool headers_ready = false;
  bool finished = false;
  bool broke = false;  // the exchange failed (before or after the headers)
  int status = 0;
  std::string content_type;
  std::string retry_after;  // an instance's 429/503 hint, passed on
  std::deque<std::string> chunks;
  size_t queued_bytes = 0;  // in `chunks`: a stream's reader waits while its client is this far behind
  std::string kept;  // the reply so far (bounded), for the prompt tree
  std::atomic<bool> client_gone{false};
  std::unique_ptr<httplib::Client> client;  // stop() breaks a wait on the instance off
  std::thread thread;

  // Stops reading the instance: its connection closes, so the instance cancels the request (a
  // reader waiting for room stops too). Without `mutex` held.
  void stop_reading();
  // stop_reading, then waits for the reader thread to end.
  void abandon();
};

// The client's side of a relayed stream: what the relay thread has read and stitched, waiting for
// the client's connection to pull it (on an I/O thread, woken by `wake`). The relay thread waits
// while the client is `limit` bytes behind, so a slow client holds the instance back (TCP) rather
// than the router queueing without bound.
struct RelayChannel {
  explicit RelayChannel(size_t limit_bytes) : limit(limit_bytes) {}
  // Relay thread: false once the client has gone (nothing more is taken).
  bool write(std::string chunk);
  // Relay thread: the reply is over; `broke`: it broke off (the client's connection is cut).
  void finish(bool broke);
  bool client_gone();

  const size_t limit;
  std::mutex mutex;
  std::condition_variable room;
  std::deque<std::string> chunks;  // guarded by mutex
  size_t queued = 0;               // guarded by mutex
  bool complete = false;           // guarded by mutex
  bool broke = false;              // guarded by mutex
  bool gone = false;               // guarded by mutex
  std::function<void()> wake;      // guarded by mutex; called under it
};

class RelayBody final : public http::BodySource {
 public:
  explicit RelayBody(std::shared_ptr<RelayChannel> channel) : channel_(std::move(channel)) {}
  ~RelayBody() override { cancel(); }
  bool pull(std::string& out) override;
  void on_ready(std::function<void()> wake) override;
  void cancel() override;
  bool failed() const override;

 private:
  std::shared_ptr<RelayChannel> channel_;
};

// A streamed reply on its way to the client: the upstream it comes from now, and, with a
// failover, the stitcher joining its upstreams into one stream.
struct Router::Relay {
  std::string method, path, authorization;  // of the client's request
  std::shared_ptr<Upstream> up;
  std::string instance;  // of `up`
  std::string state_id;  // of `instance`
  std::shared_ptr<Failover> failover;
  SseStitcher stitcher;
  std::unordered_set<std::string> failed;  // instances that broke off this reply
  std::string kept;                        // what the client got (bounded), for the prompt tree
  std::atomic<bool> reported{false};       // on_done ran (once, whether the stream ended or the client left)
  double first_text_at = -1;               // the relay thread's: when the first generated text went out
};

}  // namespace mnemo::router

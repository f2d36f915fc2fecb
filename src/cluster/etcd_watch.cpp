// EtcdClient::watch_prefix. The gateway's watch is one long HTTP reply that only speaks when
// something changes, and httplib gives no way to wait on it with a deadline short of failing the
// request (a read timeout breaks the connection). So a reader thread, scoped to the call, blocks
// on the stream and hands parsed events over; the calling thread delivers them and polls `stop`.
// To stop, it shuts the reader's socket down (httplib::Client::stop is meant for exactly this).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>

#include <httplib.h>

#include "cluster/etcd_client.h"
#include "cluster/etcd_connection.h"
#include "cluster/etcd_wire.h"

namespace mnemo::cluster {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

constexpr auto kStopPollInterval = 100ms;
// After asking the reader to stop, how often to repeat the request: client.stop() only reaches a
// request already in flight, and the reader may still be connecting.
constexpr auto kStopRepeatInterval = 20ms;
constexpr size_t kMaxErrorBodyBytes = 4096;

// One watch stream read on its own thread. The destructor stops and joins it, so an exception
// from the caller's on_event cannot leave the thread running.
class WatchStream {
 public:
  WatchStream(const EtcdEndpoint& endpoint, std::string token, double connect_timeout_seconds, std::string request_body)
      : client_(wire::etcd_connection(endpoint)), token_(std::move(token)), request_body_(std::move(request_body)) {
    client_->set_connection_timeout(std::chrono::duration<double>(connect_timeout_seconds));
    client_->set_write_timeout(std::chrono::duration<double>(connect_timeout_seconds));
    client_->set_read_timeout(std::chrono::duration<double>(EtcdClient::kWatchIdleLimitSeconds));
    reader_ = std::thread([this] { read(); });
  }
  ~WatchStream() { stop(); }
  WatchStream(const WatchStream&) = delete;
  WatchStream& operator=(const WatchStream&) = delete;

  // Waits up to `timeout` for events or the end of the stream; moves the events into `events`.
  // Returns the reason the stream ended once it has (after its last events were taken).
  std::optional<Error> take(std::vector<EtcdClient::WatchEvent>& events, std::chrono::milliseconds timeout) {
    std::unique_lock lock(mutex_);
    changed_.wait_for(lock, timeout, [&] { return !events_.empty() || ended_.has_value(); });
    events.swap(events_);
    events_.clear();
    return events.empty() ? ended_ : std::nullopt;
  }

  void stop() {
    if (!reader_.joinable()) return;
    stopping_.store(true);
    std::unique_lock lock(mutex_);
    while (!ended_.has_value()) {
      lock.unlock();
      client_->stop();
      lock.lock();
      changed_.wait_for(lock, kStopRepeatInterval, [&] { return ended_.has_value(); });
    }
    lock.unlock();
    reader_.join();
  }

 private:
  void read() {
    int status = 0;
    std::string error_body;
    std::optional<Error> failure;
    wire::JsonObjectSplitter splitter;

    httplib::Request request;
    request.method = "POST";
    request.path = "/v3/watch";
    request.body = request_body_;
    request.set_header("Content-Type", "application/json");
    if (!token_.empty()) request.set_header("Authorization", token_);
    request.response_handler = [&](const httplib::Response& response) {
      status = response.status;
      return true;
    };
    request.content_receiver = [&](const char* data, size_t size, uint64_t, uint64_t) {
      if (stopping_.load()) return false;
      if (status != 200) {
        if (error_body.size() < kMaxErrorBodyBytes) error_body.append(data, std::min(size, kMaxErrorBodyBytes - error_body.size()));
        return true;
      }
      std::vector<std::string> objects;
      if (auto split = splitter.feed(std::string_view(data, size), objects); !split.ok()) failure = split.error();
      std::vector<EtcdClient::WatchEvent> parsed;
      for (const std::string& object : objects) {
        auto events = parse_watch_chunk(object);
        if (!events.ok()) {
          failure = events.error();
          break;
        }
        for (auto& event : *events) parsed.push_back(std::move(event));
      }
      if (!parsed.empty()) {
        std::lock_guard lock(mutex_);
        for (auto& event : parsed) events_.push_back(std::move(event));
        changed_.notify_all();
      }
      return !failure.has_value();
    };
    const httplib::Result sent = client_->send(request);

    Error why = failure.value_or(Error(""));
    if (!failure.has_value()) {
      if (status == 0) {
        why = make_error("no reply: {}", httplib::to_string(sent.error()));
      } else if (status != 200) {
        auto parsed = wire::parse_object(error_body);
        auto message = parsed.ok() ? wire::error_message(*parsed) : std::nullopt;
        why = make_error("HTTP {}: {}", status, message ? *message : wire::printable(error_body.substr(0, 200)));
      } else if (sent.error() == httplib::Error::Read) {
        why = make_error("stream broke (etcd gone, or no data for {} s)", EtcdClient::kWatchIdleLimitSeconds);
      } else {
        why = make_error("stream ended: {}", sent ? "closed by etcd" : httplib::to_string(sent.error()));
      }
    }
    std::lock_guard lock(mutex_);
    ended_ = std::move(why);
    changed_.notify_all();
  }

  std::unique_ptr<httplib::Client> client_;
  const std::string token_;
  const std::string request_body_;
  std::atomic<bool> stopping_{false};
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<EtcdClient::WatchEvent> events_;  // guarded by mutex_
  std::optional<Error> ended_;                  // guarded by mutex_; set once, by the reader
  std::thread reader_;                          // started by the constructor once all else exists
};

}  // namespace

Status EtcdClient::watch_prefix(const std::string& prefix, int64_t start_revision,
                                const std::function<void(const WatchEvent&)>& on_event,
                                const std::function<bool()>& stop) const {
  const std::string what = fmt::format("watch prefix {} from revision {}", wire::printable(prefix), start_revision);
  const std::string first = prefix.empty() ? std::string(1, '\0') : prefix;  // as in get_prefix
  const json create = {{"create_request",
                        {{"key", base64_encode(first)},
                         {"range_end", base64_encode(prefix_range_end(prefix))},
                         {"start_revision", std::to_string(start_revision)}}}};
  // A token etcd no longer takes ends the stream; the caller's resync renews it (post()).
  MNEMO_ASSIGN_OR_RETURN(std::string token, auth_token(false));
  WatchStream stream(endpoint_, std::move(token), timeout_seconds_, create.dump());
  std::vector<WatchEvent> events;
  while (true) {
    std::optional<Error> ended = stream.take(events, kStopPollInterval);
    for (const WatchEvent& event : events) on_event(event);
    if (ended.has_value()) return error_for(what, *ended);
    if (stop()) return ok_status();  // ~WatchStream stops the reader
  }
}

}  // namespace mnemo::cluster

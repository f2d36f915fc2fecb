// The router's view of one instance's cache, fed by the instance's own insert and evict events
// (GET /v1/internal/cache_events, kv/cache_events.h; SPEC M7): the keys of the chunks it holds,
// exactly as its index names them, and whether with every layer or only the global ones. A router that tokenizes prompts the same way (server/prompt.h)
// computes the same keys and so knows how much of a prompt each instance holds, evictions
// included, without waiting for a TTL.
//
// Between routing a request and the instance's events for it, the router records the prompt's
// keys as pending (the instance will hold them once it has computed the prompt); pending keys
// expire after a TTL unless an event confirms them, and an evict event removes them.
//
// One thread per follower long-polls the instance; on errors it retries every half second and
// keeps what it knew (an instance that stays away leaves the member view, and its follower with it).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "kv/chunk_reuse.h"
#include "util/result.h"

namespace httplib {
class Client;
}

namespace mnemo::router {

class CacheFollower {
 public:
  // Starts following the instance at `address` ("http://host:port"), sending `authorization`
  // (an Authorization header value, "" for none) to instances that require an API key.
  explicit CacheFollower(std::string address, std::string authorization = "", double pending_ttl_seconds = 30);
  ~CacheFollower();  // stops the thread (breaks off a poll in progress)
  // Asks the thread to stop without waiting for it (the destructor then waits less).
  void request_stop();
  CacheFollower(const CacheFollower&) = delete;
  CacheFollower& operator=(const CacheFollower&) = delete;

  // How many chunks of `keys` (a prompt's chunk keys, in order) the instance would reuse: its
  // own accounting (kv/chunk_reuse.h) of what each chunk holds, dropped chunks below held ones
  // recomputed in place and compact ones where the sliding window allows, recorded pending
  // chunks counted as held. Without `include_pending`: only the leading chunks the events
  // confirm to hold every layer (what a sender may skip).
  size_t matched_chunks(std::span<const uint64_t> keys, double now, bool include_pending = true) const;
  // The instance is about to compute these chunks (a request routed there).
  void record_pending(std::span<const uint64_t> keys, double now);
  // Applies one reply of the events endpoint; an Error if it is malformed (nothing applied).
  Status apply(const nlohmann::json& reply);

  bool following() const;  // a snapshot arrived: matches reflect the instance's cache
  size_t held_chunks() const;
  size_t compact_chunks() const;  // of them, held as their global layers only
  int32_t chunk_tokens() const;  // the instance's chunk size (0 until the first reply)

 private:
  void run();

  const std::string address_;
  const std::string authorization_;
  const double pending_ttl_seconds_;

  mutable std::mutex mutex_;
  std::condition_variable stop_requested_;
  std::unordered_map<uint64_t, ChunkHold> held_;    // guarded by mutex_: never kNone
  std::unordered_map<uint64_t, double> pending_;    // guarded by mutex_: key -> recorded at
  uint64_t epoch_ = 0;                              // guarded by mutex_
  uint64_t next_ = 0;                               // guarded by mutex_
  bool following_ = false;                          // guarded by mutex_
  int32_t chunk_tokens_ = 0;                        // guarded by mutex_
  int32_t sliding_window_ = 0;                      // guarded by mutex_
  bool stopping_ = false;                           // guarded by mutex_
  httplib::Client* client_ = nullptr;               // guarded by mutex_: the poll in progress, for stop
  std::thread thread_;
};

}  // namespace mnemo::router

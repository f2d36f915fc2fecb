// What an instance's cache holds, as a stream of events for the router's global prompt trees
// (SPEC M7: the trees are fed by the instances' insert and evict events, not only by what the
// router routed). Each event names a chunk by its key (PrefixIndex::chunk_key: a hash of the whole
// path, the same on every instance, so a router that tokenizes a prompt the same way computes the
// same keys) and says what the instance now holds of its KV: every layer in some tier, only the
// global layers (sliding-window history), or nothing.
//
// The engine thread records; any thread reads. A reader follows the log by sequence number; one
// that fell behind the kept events, or whose epoch is another process's (the instance
// restarted), gets a snapshot of every held key instead, then events from there.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kv/chunk_reuse.h"

namespace mnemo {

class CacheEventLog {
 public:
  // Keeps the last `kept_events` events for readers that follow (older ones: a snapshot).
  explicit CacheEventLog(size_t kept_events = size_t{1} << 16);

  // The chunk keyed `key` now holds `hold`. Repeats are ignored.
  void record(uint64_t key, ChunkHold hold);

  struct Batch {
    uint64_t epoch = 0;
    uint64_t next = 0;        // the sequence number to read after next time
    bool snapshot = false;    // `held` is every key held; forget what was known before
    std::vector<std::pair<uint64_t, ChunkHold>> held;    // snapshot only: never kNone
    std::vector<std::pair<uint64_t, ChunkHold>> events;  // in order
  };
  // The events after `after` of `epoch` (at most `max_events`), waiting up to `wait` for one;
  // a snapshot when `epoch` is not this log's or those events are no longer kept.
  Batch read(uint64_t epoch, uint64_t after, std::chrono::milliseconds wait, size_t max_events = 10000);

  uint64_t epoch() const { return epoch_; }
  size_t held_count() const;

 private:
  const size_t kept_events_;
  const uint64_t epoch_;  // random per process: a reader of another instance's log starts over

  mutable std::mutex mutex_;
  std::condition_variable recorded_;
  std::unordered_map<uint64_t, ChunkHold> held_;       // guarded by mutex_: never kNone
  std::deque<std::pair<uint64_t, ChunkHold>> events_;  // guarded by mutex_; events_[i] has sequence first_seq_ + i
  uint64_t first_seq_ = 1;                             // guarded by mutex_
};

}  // namespace mnemo

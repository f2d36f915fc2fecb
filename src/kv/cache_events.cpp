#include "kv/cache_events.h"

#include <random>

namespace mnemo {

CacheEventLog::CacheEventLog(size_t kept_events)
    : kept_events_(kept_events == 0 ? 1 : kept_events), epoch_([] {
        std::random_device random;
        return (uint64_t{random()} << 32 | random()) | 1;  // never 0: a new reader's epoch
      }()) {}

void CacheEventLog::record(uint64_t key, ChunkHold hold) {
  {
    std::lock_guard lock(mutex_);
    if (hold == ChunkHold::kNone) {
      if (held_.erase(key) == 0) return;
    } else {
      const auto [it, inserted] = held_.try_emplace(key, hold);
      if (!inserted && it->second == hold) return;
      it->second = hold;
    }
    events_.emplace_back(key, hold);
    if (events_.size() > kept_events_) {
      events_.pop_front();
      ++first_seq_;
    }
  }
  recorded_.notify_all();
}

CacheEventLog::Batch CacheEventLog::read(uint64_t epoch, uint64_t after, std::chrono::milliseconds wait,
                                         size_t max_events) {
  std::unique_lock lock(mutex_);
  const uint64_t end = first_seq_ + events_.size();  // the sequence number of the next event
  Batch batch;
  batch.epoch = epoch_;
  // A reader of another epoch, one that is too far behind, or one claiming events not yet
  // recorded: start it over from a snapshot.
  if (epoch != epoch_ || after + 1 < first_seq_ || after >= end) {
    batch.snapshot = true;
    batch.held.assign(held_.begin(), held_.end());
    batch.next = end - 1;
    return batch;
  }
  if (after + 1 == end) {
    recorded_.wait_for(lock, wait, [&] { return first_seq_ + events_.size() > end; });
    if (after + 1 < first_seq_) {  // fell behind while waiting
      lock.unlock();
      return read(0, 0, std::chrono::milliseconds(0), max_events);
    }
  }
  const uint64_t now_end = first_seq_ + events_.size();
  const uint64_t last = std::min<uint64_t>(now_end, after + 1 + max_events);
  for (uint64_t s = after + 1; s < last; ++s) batch.events.push_back(events_[s - first_seq_]);
  batch.next = last - 1;
  return batch;
}

size_t CacheEventLog::held_count() const {
  std::lock_guard lock(mutex_);
  return held_.size();
}

}  // namespace mnemo

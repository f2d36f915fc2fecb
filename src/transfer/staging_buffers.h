// Reused byte buffers for outgoing KV transfers (SPEC D2, M5): each message is encoded into one
// contiguous region, and sending many increments should not allocate (and fault in) a fresh
// region of megabytes for each. A buffer goes back to the pool when its send completes; the next
// send of about its size takes it again.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

namespace mnemo::transfer {

class StagingBuffers {
 public:
  // Keeps at most `max_buffers` buffers holding at most `max_bytes` of capacity together.
  explicit StagingBuffers(size_t max_buffers = 8, size_t max_bytes = size_t{256} << 20);

  // An empty buffer with capacity for at least `bytes`: the smallest kept one that is large
  // enough, else the largest kept one grown, else a new one.
  std::vector<uint8_t> acquire(size_t bytes);
  // Takes a buffer back for reuse (its contents are discarded); a buffer beyond the limits is
  // freed, and so is the smallest kept one when a larger one arrives at the limit.
  void release(std::vector<uint8_t>&& buffer);

  struct Stats {
    uint64_t acquired = 0;  // calls to acquire
    uint64_t reused = 0;    // of them, served by a kept buffer without growing it
    size_t kept_buffers = 0;
    size_t kept_bytes = 0;  // capacity of the kept buffers
  };
  Stats stats() const;

 private:
  const size_t max_buffers_;
  const size_t max_bytes_;
  mutable std::mutex mutex_;
  std::vector<std::vector<uint8_t>> kept_;  // guarded by mutex_
  size_t kept_bytes_ = 0;
  uint64_t acquired_ = 0;
  uint64_t reused_ = 0;
};

}  // namespace mnemo::transfer

#include "transfer/staging_buffers.h"

#include <algorithm>

namespace mnemo::transfer {

StagingBuffers::StagingBuffers(size_t max_buffers, size_t max_bytes) : max_buffers_(max_buffers), max_bytes_(max_bytes) {}

std::vector<uint8_t> StagingBuffers::acquire(size_t bytes) {
  std::vector<uint8_t> buffer;
  {
    std::lock_guard lock(mutex_);
    ++acquired_;
    if (!kept_.empty()) {
      // Smallest that fits; otherwise the largest, which needs the least growth.
      auto best = kept_.end();
      for (auto it = kept_.begin(); it != kept_.end(); ++it) {
        if (it->capacity() >= bytes && (best == kept_.end() || it->capacity() < best->capacity())) best = it;
      }
      if (best == kept_.end()) {
        best = std::max_element(kept_.begin(), kept_.end(),
                                [](const auto& a, const auto& b) { return a.capacity() < b.capacity(); });
      } else {
        ++reused_;
      }
      kept_bytes_ -= best->capacity();
      buffer = std::move(*best);
      kept_.erase(best);
    }
  }
  buffer.clear();
  buffer.reserve(bytes);
  return buffer;
}

void StagingBuffers::release(std::vector<uint8_t>&& buffer) {
  const size_t capacity = buffer.capacity();
  if (capacity == 0 || capacity > max_bytes_) return;
  std::vector<uint8_t> freed;  // dropped after the lock is released
  std::lock_guard lock(mutex_);
  if (kept_.size() >= max_buffers_ || kept_bytes_ + capacity > max_bytes_) {
    const auto smallest = std::min_element(kept_.begin(), kept_.end(),
                                           [](const auto& a, const auto& b) { return a.capacity() < b.capacity(); });
    if (smallest == kept_.end() || smallest->capacity() >= capacity ||
        kept_bytes_ - smallest->capacity() + capacity > max_bytes_) {
      return;  // `buffer` is freed on return
    }
    kept_bytes_ -= smallest->capacity();
    freed = std::move(*smallest);
    kept_.erase(smallest);
  }
  kept_bytes_ += capacity;
  kept_.push_back(std::move(buffer));
}

StagingBuffers::Stats StagingBuffers::stats() const {
  std::lock_guard lock(mutex_);
  return {acquired_, reused_, kept_.size(), kept_bytes_};
}

}  // namespace mnemo::transfer

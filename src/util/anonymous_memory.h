// Zeroed memory straight from the kernel, for the large buffers a decode step streams through
// (the KV pool, the weights repacked at load). Transparent huge pages are requested for it: one
// TLB entry per 2 MiB instead of per 4 KiB, and the hardware prefetchers, which stop at page
// boundaries, run on. The default model's batch-32 attention read its pool 7% faster so.
// Pages become resident when first written (the kernel may make a whole 2 MiB page resident
// then), so a large reservation costs nothing until it is used.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mnemo {

class AnonymousMemory {
 public:
  AnonymousMemory() = default;
  // Throws std::bad_alloc when the kernel refuses the mapping. 0 bytes: no mapping.
  explicit AnonymousMemory(size_t bytes);
  ~AnonymousMemory();
  AnonymousMemory(AnonymousMemory&& other) noexcept;
  AnonymousMemory& operator=(AnonymousMemory&& other) noexcept;
  AnonymousMemory(const AnonymousMemory&) = delete;
  AnonymousMemory& operator=(const AnonymousMemory&) = delete;

  uint8_t* data() { return data_; }
  const uint8_t* data() const { return data_; }
  size_t size() const { return bytes_; }

 private:
  uint8_t* data_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace mnemo

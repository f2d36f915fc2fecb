#include "util/anonymous_memory.h"

#include <sys/mman.h>

#include <new>
#include <utility>

namespace mnemo {

namespace {
constexpr uintptr_t kHugePage = uintptr_t{2} << 20;
}  // namespace

AnonymousMemory::AnonymousMemory(size_t bytes) : bytes_(bytes) {
  if (bytes == 0) return;
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  data_ = static_cast<uint8_t*>(p);
  // The whole 2 MiB pages inside the mapping; a kernel without transparent huge pages says no,
  // and the memory is as good in small pages.
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(data_) + kHugePage - 1) & ~(kHugePage - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(data_) + bytes) & ~(kHugePage - 1);
  if (begin < end) (void)::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
}

AnonymousMemory::~AnonymousMemory() {
  if (data_ != nullptr) ::munmap(data_, bytes_);
}

AnonymousMemory::AnonymousMemory(AnonymousMemory&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

AnonymousMemory& AnonymousMemory::operator=(AnonymousMemory&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) ::munmap(data_, bytes_);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

}  // namespace mnemo

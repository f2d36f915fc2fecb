#include "kv/kv_storage.h"

#include <sys/mman.h>

#include <new>

namespace mnemo {

void KvStorage::Unmap::operator()(uint8_t* p) const {
  if (p != nullptr) ::munmap(p, bytes);
}

namespace {
uint8_t* map_zeroed(size_t bytes) {
  if (bytes == 0) return nullptr;
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  return static_cast<uint8_t*>(p);
}
}  // namespace

KvStorage::KvStorage(const KvLayout& layout, int32_t n_blocks)
    : layout_(layout),
      n_blocks_(n_blocks),
      data_(map_zeroed(static_cast<size_t>(n_blocks) * layout.block_bytes()),
            Unmap{static_cast<size_t>(n_blocks) * layout.block_bytes()}) {}

}  // namespace mnemo

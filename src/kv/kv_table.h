// A sequence's hold on the KV cache: the pool blocks that hold its chunks, chunk i in entry i,
// on the device (what the forward pass reads) or, while the sequence is swapped out, on the
// host. Each entry carries one reference the table owns. Only KvCache makes, grows, moves and
// releases a table; everyone else reads it. Move-only: a copy would hold references it does
// not own.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "kv/kv_layout.h"

namespace mnemo {

class KvTable {
 public:
  KvTable() = default;
  KvTable(KvTable&& other) noexcept : ids_(std::move(other.ids_)), on_host_(other.on_host_) { other.ids_.clear(); }
  KvTable& operator=(KvTable&& other) noexcept {
    ids_ = std::move(other.ids_);
    on_host_ = other.on_host_;
    other.ids_.clear();
    return *this;
  }
  KvTable(const KvTable&) = delete;
  KvTable& operator=(const KvTable&) = delete;

  size_t size() const { return ids_.size(); }
  bool empty() const { return ids_.empty(); }
  // Whether the blocks are the host's (the sequence is swapped out) rather than the device's.
  bool on_host() const { return on_host_; }
  BlockId operator[](size_t chunk) const { return ids_[chunk]; }
  std::span<const BlockId> blocks() const { return ids_; }
  auto begin() const { return ids_.begin(); }
  auto end() const { return ids_.end(); }

 private:
  friend class KvCache;
  std::vector<BlockId> ids_;
  bool on_host_ = false;
};

}  // namespace mnemo

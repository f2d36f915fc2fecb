// Slots for compact copies of chunks (a sliding-window model's global layers only) carved out of
// device blocks, so that history a window before its conversation's end costs the device tier a
// fraction of a block (Gemma 3: 3 of 18 layers, six chunks per block) from the same pool as
// everything else. A block handed over becomes a slab of `slots_per_slab` slots; it is handed
// back when its last slot is freed. Device-free bookkeeping, like BlockAllocator.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "kv/kv_layout.h"

namespace mnemo {

// Slot `i` of the slab in block `b` is b * slots_per_slab + i.
using SlotId = int32_t;

class CompactSlabs {
 public:
  static constexpr int32_t kMaxSlotsPerSlab = 32;
  // 0 or 1 slots per slab (a compact copy saves nothing): no slab is ever made.
  explicit CompactSlabs(int32_t slots_per_slab);

  bool enabled() const { return slots_per_slab_ >= 2; }
  int32_t slots_per_slab() const { return slots_per_slab_; }
  BlockId slab_of(SlotId slot) const { return slot / slots_per_slab_; }
  int32_t index_in_slab(SlotId slot) const { return slot % slots_per_slab_; }

  // A free slot of a slab other than `except`, in the fullest slab that has one (so that emptier
  // slabs drain and go back), or nullopt.
  std::optional<SlotId> allocate(BlockId except = kNoBlock);
  // `block` becomes a slab; its first slot is returned, taken.
  SlotId add_slab(BlockId block);
  // Frees a slot. Returns its slab's block when that was the slab's last used slot: the block is
  // no longer a slab, and the caller frees it.
  std::optional<BlockId> release(SlotId slot);

  int32_t n_slabs() const { return static_cast<int32_t>(used_.size()); }
  int32_t n_used() const { return n_used_; }
  int32_t n_free_slots() const { return n_slabs() * slots_per_slab_ - n_used_; }
  // The used slots of a slab, in slot order.
  std::vector<SlotId> used_slots(BlockId slab) const;

 private:
  int32_t slots_per_slab_;
  std::map<BlockId, uint32_t> used_;  // slab -> bitmask of used slots; ordered: deterministic choices
  int32_t n_used_ = 0;
};

}  // namespace mnemo

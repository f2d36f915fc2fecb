#include "kv/compact_slabs.h"

#include <algorithm>
#include <bit>

#include "util/check.h"

namespace mnemo {

CompactSlabs::CompactSlabs(int32_t slots_per_slab) : slots_per_slab_(std::clamp(slots_per_slab, 0, kMaxSlotsPerSlab)) {}

std::optional<SlotId> CompactSlabs::allocate(BlockId except) {
  const uint32_t full = slots_per_slab_ >= 32 ? ~0u : (1u << slots_per_slab_) - 1;
  auto best = used_.end();
  for (auto it = used_.begin(); it != used_.end(); ++it) {
    if (it->first == except || it->second == full) continue;
    if (best == used_.end() || std::popcount(it->second) > std::popcount(best->second)) best = it;
  }
  if (best == used_.end()) return std::nullopt;
  const int32_t index = std::countr_one(best->second);
  best->second |= 1u << index;
  ++n_used_;
  return best->first * slots_per_slab_ + index;
}

SlotId CompactSlabs::add_slab(BlockId block) {
  MNEMO_CHECK(enabled(), "compact slabs of {} slots", slots_per_slab_);
  MNEMO_CHECK(block >= 0 && !used_.contains(block), "block {} is already a slab", block);
  used_.emplace(block, 1u);
  ++n_used_;
  return block * slots_per_slab_;
}

std::optional<BlockId> CompactSlabs::release(SlotId slot) {
  const BlockId block = slab_of(slot);
  const auto it = used_.find(block);
  const uint32_t bit = 1u << index_in_slab(slot);
  MNEMO_CHECK(it != used_.end() && (it->second & bit) != 0, "slot {} is not in use", slot);
  it->second &= ~bit;
  --n_used_;
  if (it->second != 0) return std::nullopt;
  used_.erase(it);
  return block;
}

std::vector<SlotId> CompactSlabs::used_slots(BlockId slab) const {
  std::vector<SlotId> out;
  const auto it = used_.find(slab);
  if (it == used_.end()) return out;
  for (int32_t i = 0; i < slots_per_slab_; ++i) {
    if ((it->second >> i) & 1u) out.push_back(slab * slots_per_slab_ + i);
  }
  return out;
}

}  // namespace mnemo

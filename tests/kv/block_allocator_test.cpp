// BlockAllocator: exact states of the free list and reference counts.
#include <gtest/gtest.h>

#include "kv/block_allocator.h"
#include "kv/kv_storage.h"

namespace mnemo {
namespace {

TEST(BlockAllocator, HandsOutBlocksInOrderAndReusesTheLastFreed) {
  BlockAllocator a(4);
  EXPECT_EQ(a.n_free(), 4);
  auto first = a.allocate(2);
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(*first, (std::vector<BlockId>{0, 1}));
  EXPECT_EQ(a.n_free(), 2);
  a.release(0);
  EXPECT_EQ(a.n_free(), 3);
  auto second = a.allocate(2);
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(*second, (std::vector<BlockId>{0, 2}));
}

TEST(BlockAllocator, NoRoomChangesNothing) {
  BlockAllocator a(3);
  ASSERT_TRUE(a.allocate(2).has_value());
  EXPECT_FALSE(a.allocate(2).has_value());
  EXPECT_EQ(a.n_free(), 1);
  EXPECT_FALSE(a.allocate(-1).has_value());
  auto last = a.allocate(1);
  ASSERT_TRUE(last.has_value());
  EXPECT_EQ(*last, (std::vector<BlockId>{2}));
}

TEST(BlockAllocator, SharedBlockIsFreedByItsLastReference) {
  BlockAllocator a(2);
  const BlockId id = (*a.allocate(1))[0];
  a.add_ref(id);
  a.add_ref(id);
  EXPECT_EQ(a.ref_count(id), 3);
  a.release(id);
  a.release(id);
  EXPECT_EQ(a.n_free(), 1);
  a.release(id);
  EXPECT_EQ(a.ref_count(id), 0);
  EXPECT_EQ(a.n_free(), 2);
}

TEST(BlockAllocatorDeathTest, ReleasingAFreeBlockIsABug) {
  BlockAllocator a(2);
  EXPECT_DEATH(a.release(1), "not allocated");
  EXPECT_DEATH(a.add_ref(5), "not allocated");
}

TEST(KvStorage, BlocksAreDisjointAndLayoutOffsetsCoverTheBlock) {
  const KvLayout layout{2, 2, 8, 4, 4, DType::F16};
  EXPECT_EQ(layout.block_bytes(), static_cast<size_t>(2 * 2 * (4 * 8 + 4 * 4) * 2));
  KvStorage kv(layout, 3);
  EXPECT_EQ(kv.block(1) - kv.block(0), static_cast<ptrdiff_t>(layout.block_bytes()));
  // The last head's V plane of the last layer ends exactly at the end of the block.
  const auto* last_v = static_cast<const uint8_t*>(kv.values(0, 1, 1));
  EXPECT_EQ(last_v + layout.v_head_elems() * 2, kv.block(1));
  const auto* first_v = static_cast<const uint8_t*>(kv.values(0, 0, 0));
  const auto* last_k = static_cast<const uint8_t*>(kv.keys(0, 0, 1));
  EXPECT_EQ(last_k + layout.k_head_elems() * 2, first_v);
  const KvLayout f32{2, 2, 8, 4, 4, DType::F32};
  EXPECT_EQ(f32.block_bytes(), 2 * layout.block_bytes());
}

}  // namespace
}  // namespace mnemo

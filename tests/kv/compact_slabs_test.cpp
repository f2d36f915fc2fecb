// CompactSlabs: exact states of slabs and slots.
#include <gtest/gtest.h>

#include "kv/compact_slabs.h"

namespace mnemo {
namespace {

TEST(CompactSlabs, ABlockBecomesASlabWhoseFirstSlotIsTaken) {
  CompactSlabs s(3);
  ASSERT_TRUE(s.enabled());
  EXPECT_FALSE(s.allocate().has_value());  // no slab yet
  EXPECT_EQ(s.add_slab(5), 15);
  EXPECT_EQ(s.slab_of(15), 5);
  EXPECT_EQ(s.index_in_slab(16), 1);
  EXPECT_EQ(s.allocate(), 16);
  EXPECT_EQ(s.allocate(), 17);
  EXPECT_FALSE(s.allocate().has_value());  // full
  EXPECT_EQ(s.n_slabs(), 1);
  EXPECT_EQ(s.n_used(), 3);
  EXPECT_EQ(s.n_free_slots(), 0);
  EXPECT_EQ(s.used_slots(5), (std::vector<SlotId>{15, 16, 17}));
}

TEST(CompactSlabs, TheLastSlotFreedHandsTheBlockBack) {
  CompactSlabs s(3);
  s.add_slab(2);
  const SlotId second = *s.allocate();
  EXPECT_FALSE(s.release(6).has_value());  // slot 0 of block 2; slot 1 still used
  EXPECT_EQ(s.used_slots(2), (std::vector<SlotId>{second}));
  EXPECT_EQ(s.allocate(), 6);  // the lowest free slot again
  EXPECT_FALSE(s.release(6).has_value());
  EXPECT_EQ(s.release(second), 2);
  EXPECT_EQ(s.n_slabs(), 0);
  EXPECT_EQ(s.n_used(), 0);
  EXPECT_TRUE(s.used_slots(2).empty());
  EXPECT_FALSE(s.allocate().has_value());
}

TEST(CompactSlabs, SlotsComeFromTheFullestSlabSoEmptierOnesDrain) {
  CompactSlabs s(4);
  s.add_slab(1);                 // 1 used
  s.add_slab(7);                 // 1 used
  EXPECT_EQ(s.allocate(), 5);    // a tie: the lower block
  EXPECT_EQ(s.allocate(), 6);    // block 1 is fuller now
  EXPECT_EQ(s.allocate(), 7);    // block 1 full
  EXPECT_EQ(s.allocate(), 29);   // block 7, slot 1
  EXPECT_FALSE(s.release(4).has_value());
  // Block 1 has 3 used, block 7 has 2: block 1 again, but not when it is excluded.
  EXPECT_EQ(s.allocate(/*except=*/1), 30);
  EXPECT_EQ(s.allocate(), 4);
  EXPECT_EQ(s.n_free_slots(), 1);
}

TEST(CompactSlabs, FewerThanTwoSlotsPerBlockSaveNothing) {
  EXPECT_FALSE(CompactSlabs(1).enabled());
  EXPECT_FALSE(CompactSlabs(0).enabled());
  EXPECT_EQ(CompactSlabs(64).slots_per_slab(), CompactSlabs::kMaxSlotsPerSlab);
}

}  // namespace
}  // namespace mnemo

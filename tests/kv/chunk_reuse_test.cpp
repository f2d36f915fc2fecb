// plan_chunk_use: which chunks of a matched chain a request reuses, exactly, for whole, compact
// (sliding-window history) and dropped chunks: the rules the cache applies and the router
// predicts with.
#include <gtest/gtest.h>

#include <vector>

#include "kv/chunk_reuse.h"

namespace mnemo {
namespace {

constexpr ChunkHold W = ChunkHold::kWhole, C = ChunkHold::kCompact, N = ChunkHold::kNone;
constexpr ChunkUse F = ChunkUse::kFull, K = ChunkUse::kCompact, R = ChunkUse::kRecompute;

std::vector<ChunkUse> plan(std::vector<ChunkHold> holds, int32_t window) { return plan_chunk_use(holds, 4, window); }

TEST(ChunkReuse, WholeChunksAreReusedAndDroppedOnesRecomputedInPlace) {
  EXPECT_EQ(plan({W, W, W}, 0), (std::vector<ChunkUse>{F, F, F}));
  EXPECT_EQ(plan({W, N, W}, 0), (std::vector<ChunkUse>{F, R, F}));
  EXPECT_EQ(reused_chunks(plan({W, N, W}, 0)), 2);
  // Dropped chunks at the end save nothing: left off.
  EXPECT_EQ(plan({W, W, N, N}, 0), (std::vector<ChunkUse>{F, F}));
  EXPECT_TRUE(plan({N, N}, 0).empty());
  EXPECT_TRUE(plan({}, 8).empty());
}

TEST(ChunkReuse, ACompactChunkIsUsedOnlyAWindowBeforeEveryComputedPosition) {
  // Chunks of 4, a window of 8: new tokens from 4 x n. A compact chunk p (ending at 4(p+1)) is
  // usable if 4(p+1) + 7 <= the earliest computed position after it.
  EXPECT_EQ(plan({C, C, W, W}, 8), (std::vector<ChunkUse>{K, K, F, F}));  // 8 + 7 <= 16
  // Ending one chunk earlier: chunk 1 (ends at 8; 15 > 12) is recomputed, and then chunk 0
  // (ends at 4; 11 > 4) too.
  EXPECT_EQ(plan({C, C, W}, 8), (std::vector<ChunkUse>{R, R, F}));
  // A dropped chunk is computed: a compact chunk within a window before it is recomputed too,
  // and so on backwards; whole chunks between keep the window.
  EXPECT_EQ(plan({C, C, N, W, W}, 8), (std::vector<ChunkUse>{R, R, R, F, F}));
  EXPECT_EQ(plan({C, W, W, N, W}, 8), (std::vector<ChunkUse>{K, F, F, R, F}));
  // A compact last chunk is recomputed and left off, which reaches back past the whole chunk.
  EXPECT_EQ(plan({C, C, C, W, C}, 8), (std::vector<ChunkUse>{R, R, R, F}));
  EXPECT_EQ(reused_chunks(plan({C, C, C, W, C}, 8)), 1);
  EXPECT_EQ(plan({C, C, W, W, C}, 8), (std::vector<ChunkUse>{K, K, F, F}));
  // Without a window there is nothing to enforce.
  std::vector<ChunkUse> use = {K, R, K};
  enforce_sliding_windows(use, 4, 0);
  EXPECT_EQ(use, (std::vector<ChunkUse>{K, R, K}));
}

TEST(SlidingWindowSizes, ChunksAWindowBeforeTheEndAreCompactable) {
  // 32-token chunks, a 512-token window, a conversation of 23 chunks: chunks 0-6 end 512 or
  // more tokens before its end.
  EXPECT_TRUE(compactable(6, 23, 32, 512));
  EXPECT_FALSE(compactable(7, 23, 32, 512));
  EXPECT_FALSE(compactable(0, 16, 32, 512));
  EXPECT_FALSE(compactable(0, 100, 32, 0));  // no window
  // 7 chunks at 3 layers and 16 at 18: (21 + 288) / 23 layers a chunk.
  EXPECT_DOUBLE_EQ(layers_per_chunk(23, 32, 512, 18, 3), (7.0 * 3 + 16.0 * 18) / 23);
  EXPECT_DOUBLE_EQ(layers_per_chunk(10, 32, 512, 18, 3), 18.0);
  EXPECT_DOUBLE_EQ(layers_per_chunk(23, 32, 0, 18, 3), 18.0);
  // A window that is not a whole number of chunks: 500 tokens still need the last 16 chunks.
  EXPECT_DOUBLE_EQ(layers_per_chunk(23, 32, 500, 18, 3), (7.0 * 3 + 16.0 * 18) / 23);
}

}  // namespace
}  // namespace mnemo

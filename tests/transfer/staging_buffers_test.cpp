// StagingBuffers: which kept buffer an acquire takes, what a release keeps, and the limits.
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "transfer/staging_buffers.h"

namespace mnemo::transfer {
namespace {

std::vector<uint8_t> buffer_of(size_t capacity) {
  std::vector<uint8_t> b;
  b.reserve(capacity);
  b.resize(capacity / 2, 7);
  return b;
}

TEST(StagingBuffers, AReleasedBufferIsTakenAgainEmptyWithItsStorage) {
  StagingBuffers pool;
  std::vector<uint8_t> first = pool.acquire(1000);
  EXPECT_TRUE(first.empty());
  EXPECT_GE(first.capacity(), 1000u);
  first.resize(1000, 1);
  const uint8_t* storage = first.data();
  pool.release(std::move(first));
  EXPECT_EQ(pool.stats().kept_buffers, 1u);
  std::vector<uint8_t> again = pool.acquire(800);
  EXPECT_TRUE(again.empty());
  EXPECT_EQ(again.data(), storage);
  const StagingBuffers::Stats s = pool.stats();
  EXPECT_EQ(s.acquired, 2u);
  EXPECT_EQ(s.reused, 1u);
  EXPECT_EQ(s.kept_buffers, 0u);
  EXPECT_EQ(s.kept_bytes, 0u);
}

TEST(StagingBuffers, TheSmallestThatFitsElseTheLargestGrown) {
  StagingBuffers pool;
  std::vector<uint8_t> small = buffer_of(100), medium = buffer_of(1000), large = buffer_of(10000);
  const uint8_t* medium_storage = medium.data();
  const uint8_t* large_storage = large.data();
  pool.release(std::move(small));
  pool.release(std::move(large));
  pool.release(std::move(medium));
  EXPECT_EQ(pool.stats().kept_bytes, 11100u);
  EXPECT_EQ(pool.acquire(500).data(), medium_storage);  // not the large one
  EXPECT_EQ(pool.stats().reused, 1u);
  // Nothing kept fits 20000: the largest is taken and grown (not counted as reused).
  const std::vector<uint8_t> grown = pool.acquire(20000);
  EXPECT_GE(grown.capacity(), 20000u);
  EXPECT_EQ(pool.stats().reused, 1u);
  EXPECT_EQ(pool.stats().kept_buffers, 1u);  // the small one
  EXPECT_EQ(pool.stats().kept_bytes, 100u);
  (void)large_storage;
}

TEST(StagingBuffers, LimitsKeepTheLargestBuffers) {
  StagingBuffers pool(/*max_buffers=*/2, /*max_bytes=*/5000);
  pool.release(buffer_of(1000));
  pool.release(buffer_of(2000));
  EXPECT_EQ(pool.stats().kept_buffers, 2u);
  pool.release(buffer_of(500));  // smaller than all kept: freed
  EXPECT_EQ(pool.stats().kept_bytes, 3000u);
  pool.release(buffer_of(3000));  // replaces the 1000 one: 2000 + 3000
  EXPECT_EQ(pool.stats().kept_buffers, 2u);
  EXPECT_EQ(pool.stats().kept_bytes, 5000u);
  pool.release(buffer_of(6000));  // over the byte limit by itself: freed
  EXPECT_EQ(pool.stats().kept_bytes, 5000u);
  pool.release(std::vector<uint8_t>{});  // no storage: nothing to keep
  EXPECT_EQ(pool.stats().kept_buffers, 2u);
}

TEST(StagingBuffers, ConcurrentAcquireAndReleaseKeepTheAccounts) {
  StagingBuffers pool(4, size_t{1} << 20);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&pool, t] {
      for (int i = 0; i < 500; ++i) {
        std::vector<uint8_t> b = pool.acquire(static_cast<size_t>(1000 + 100 * t + i));
        b.resize(b.capacity() / 2 + 1);
        pool.release(std::move(b));
      }
    });
  }
  for (auto& thread : threads) thread.join();
  const StagingBuffers::Stats s = pool.stats();
  EXPECT_EQ(s.acquired, 2000u);
  EXPECT_GT(s.reused, 0u);
  EXPECT_LE(s.kept_buffers, 4u);
  size_t kept = 0;
  for (size_t i = 0; i < s.kept_buffers; ++i) kept += pool.acquire(0).capacity();
  EXPECT_EQ(kept, s.kept_bytes);
}

}  // namespace
}  // namespace mnemo::transfer

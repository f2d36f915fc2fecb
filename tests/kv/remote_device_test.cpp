// KvCache with a remote device (kv/remote_device.h): the device bytes live with a stand-in for
// model parallelism's workers, and the cache's own device storage is poisoned between every two
// operations, so a byte the cache read without pulling it first would reach the host, the disk or
// the workers as poison. Chunks go device -> host -> disk and come back with the bytes the
// "workers" computed; a copy-on-write copies on the workers; copies ahead of need pull before
// the pass (and the staged pages are handed back after it); and when the workers cannot pull,
// push or copy, chunks are dropped or recomputed, never kept with bytes nobody has.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "kv/kv_cache.h"
#include "kv_test_support.h"

namespace mnemo::testing {
namespace {

// Where the device bytes are: what the workers hold between them.
class Workers : public RemoteDevice {
 public:
  Workers(const KvLayout& layout, int32_t n_blocks) : bytes(layout, n_blocks) {}

  Status pull(std::span<const BlockId> blocks, KvStorage& into) override {
    if (fail_pulls) return make_error("workers lost");
    for (BlockId b : blocks) std::memcpy(into.block(b), bytes.block(b), bytes.block_bytes());
    pulled += static_cast<int>(blocks.size());
    return ok_status();
  }
  Status push(std::span<const BlockId> blocks, const KvStorage& from) override {
    if (fail_pushes) return make_error("workers lost");
    for (BlockId b : blocks) std::memcpy(bytes.block(b), from.block(b), bytes.block_bytes());
    pushed += static_cast<int>(blocks.size());
    return ok_status();
  }
  Status copy(std::span<const std::pair<BlockId, BlockId>> copies) override {
    if (fail_copies) return make_error("workers lost");
    for (const auto& [from, to] : copies) std::memcpy(bytes.block(to), bytes.block(from), bytes.block_bytes());
    copied += static_cast<int>(copies.size());
    return ok_status();
  }

  // What a forward pass does on the workers: the chunk's KV, a pattern of its first token.
  void compute(BlockId block, TokenId first_token) {
    auto* f = reinterpret_cast<float*>(bytes.block(block));
    for (size_t i = 0; i < bytes.block_bytes() / sizeof(float); ++i) f[i] = static_cast<float>(first_token) + 0.01f * static_cast<float>(i);
  }
  bool holds(BlockId block, TokenId first_token) const {
    const auto* f = reinterpret_cast<const float*>(bytes.block(block));
    for (size_t i = 0; i < bytes.block_bytes() / sizeof(float); ++i) {
      if (f[i] != static_cast<float>(first_token) + 0.01f * static_cast<float>(i)) return false;
    }
    return true;
  }

  KvStorage bytes;
  bool fail_pulls = false, fail_pushes = false, fail_copies = false;
  int pulled = 0, pushed = 0, copied = 0;
};

class RemoteDeviceTest : public KvCacheTest {
 protected:
  KvPoolConfig remote_config(int32_t device, int32_t host) {
    KvPoolConfig c = config(device, host, RetentionPolicy::kLru);
    c.remote_device = &workers_;
    return c;
  }
  // The cache's own device bytes, which it must never rely on: poison.
  static void poison(KvCache& kv) {
    std::memset(kv.device().block(0), 0xEE, kv.device().block_bytes() * static_cast<size_t>(kv.n_blocks()));
  }
  // Matches `tokens`, computes on the workers what the match did not bring, caches the chunks and
  // lets the sequence go; returns the match's counts.
  PrefixMatch run_and_cache(KvCache& kv, const std::vector<TokenId>& tokens) {
    PrefixMatch match = kv.match_prefix(1, tokens, static_cast<int32_t>(tokens.size()) / kv.block_size());
    KvTable table = std::move(match.table);
    const auto n = static_cast<int32_t>(tokens.size());
    // Every chunk reused must be on the workers as it was computed.
    for (size_t b = 0; b < table.size(); ++b) {
      if (std::find(match.recompute.begin(), match.recompute.end(), static_cast<int32_t>(b)) == match.recompute.end()) {
        EXPECT_TRUE(workers_.holds(table[b], tokens[b * 2])) << "chunk " << b << " came back with other bytes";
      }
    }
    const size_t reused = table.size();
    EXPECT_TRUE(kv.prepare_write(table, static_cast<int32_t>(reused) * kv.block_size(), n));
    for (size_t b = 0; b < table.size(); ++b) {
      const bool recomputed = std::find(match.recompute.begin(), match.recompute.end(), static_cast<int32_t>(b)) != match.recompute.end();
      if (b >= reused || recomputed) workers_.compute(table[b], tokens[b * 2]);
    }
    poison(kv);
    kv.cache_prefix(1, tokens, n, table);
    poison(kv);
    kv.release(table);
    return match;
  }

  Workers workers_{tiny_layout(), 4};
};

TEST_F(RemoteDeviceTest, ChunksGoDownTheTiersAndComeBackWithTheWorkersBytes) {
  TempDir dir;
  KvPoolConfig c = remote_config(4, 2);
  c.disk = open_disk(dir);
  ASSERT_TRUE(c.disk);
  KvCache kv(tiny_layout(), c);
  const auto a = tokens_from(100, 4), b = tokens_from(200, 4), d = tokens_from(300, 4), e = tokens_from(400, 4);
  run_and_cache(kv, a);
  EXPECT_EQ(workers_.pulled, 2);  // written through to disk: read from the workers once
  clock_ += 1;
  run_and_cache(kv, b);
  clock_ += 1;
  run_and_cache(kv, d);  // a leaves the device for the host (a pull each)
  clock_ += 1;
  run_and_cache(kv, e);  // b to the host, a's host copies give way (the disk has them)
  c.disk->flush();
  EXPECT_GT(kv.counters().demoted_chunks, 0);
  // a from the disk, b from the host: pushed to the workers with the bytes computed there.
  const int pushed_before = workers_.pushed;
  clock_ += 1;
  const PrefixMatch again_a = run_and_cache(kv, a);
  EXPECT_EQ(again_a.disk_chunks + again_a.host_chunks, 2);
  EXPECT_TRUE(again_a.recompute.empty());
  clock_ += 1;
  const PrefixMatch again_b = run_and_cache(kv, b);
  EXPECT_EQ(again_b.host_chunks + again_b.disk_chunks, 2);
  EXPECT_EQ(workers_.pushed - pushed_before, 4);
  EXPECT_EQ(kv.counters().remote_pushed_blocks, 4);
  EXPECT_EQ(kv.counters().remote_failures, 0);
}

TEST_F(RemoteDeviceTest, ACopyOnWriteCopiesOnTheWorkers) {
  KvCache kv(tiny_layout(), remote_config(4, 0));
  KvTable table;
  ASSERT_TRUE(kv.prepare_write(table, 0, 3));
  workers_.compute(table[0], 10);
  workers_.compute(table[1], 12);
  poison(kv);
  KvTable fork = kv.share(table);
  ASSERT_TRUE(kv.prepare_write(fork, 3, 4));  // the second block is shared: copied
  EXPECT_NE(fork[1], table[1]);
  EXPECT_EQ(workers_.copied, 1);
  EXPECT_TRUE(workers_.holds(fork[1], 12));
  // Workers that cannot copy: the write is refused and the table is as it was.
  KvTable other = kv.share(table);
  workers_.fail_copies = true;
  const int32_t free_before = kv.n_free();
  EXPECT_FALSE(kv.prepare_write(other, 3, 4));
  EXPECT_EQ(other[1], table[1]);
  EXPECT_EQ(kv.n_free(), free_before);
  EXPECT_EQ(kv.counters().remote_failures, 1);
  kv.release(other);
  kv.release(fork);
  kv.release(table);
  EXPECT_EQ(kv.n_free(), 4);
}

TEST_F(RemoteDeviceTest, CopiesAheadOfNeedPullBeforeThePass) {
  KvPoolConfig c = remote_config(4, 4);
  c.swap_out_threshold = 0.5f;
  KvCache kv(tiny_layout(), c);
  const auto a = tokens_from(100, 4), b = tokens_from(200, 4);
  run_and_cache(kv, a);
  clock_ += 1;
  run_and_cache(kv, b);  // 4 of 4 blocks cached: below the threshold's 2 free
  kv.begin_background_work();
  EXPECT_EQ(workers_.pulled, 2);  // a's chunks, the lowest value, read before the pass
  kv.end_background_work();
  // Staged bytes go back to the kernel once the copies are done: the pages read as zeros.
  const uint8_t* staging = kv.device().block(0);
  EXPECT_TRUE(std::all_of(staging, staging + kv.device().block_bytes() * 4, [](uint8_t byte) { return byte == 0; }));
  EXPECT_EQ(kv.counters().ahead_copied_chunks, 2);
  // A third conversation takes their blocks for free; they come back from the host intact.
  clock_ += 1;
  run_and_cache(kv, tokens_from(300, 4));
  clock_ += 1;
  const PrefixMatch again = run_and_cache(kv, a);
  EXPECT_EQ(again.host_chunks + again.device_chunks, 2);
}

TEST_F(RemoteDeviceTest, WorkersThatCannotPullOrPushCostRecomputationNotWrongBytes) {
  KvCache kv(tiny_layout(), remote_config(4, 4));
  const auto a = tokens_from(100, 4), b = tokens_from(200, 4), d = tokens_from(300, 4);
  run_and_cache(kv, a);
  clock_ += 1;
  run_and_cache(kv, b);
  workers_.fail_pulls = true;
  clock_ += 1;
  run_and_cache(kv, d);  // a must leave, unreadable: dropped, not demoted
  EXPECT_EQ(kv.counters().demoted_chunks, 0);
  EXPECT_EQ(kv.counters().dropped_chunks, 2);
  EXPECT_GT(kv.counters().remote_failures, 0);
  workers_.fail_pulls = false;
  clock_ += 1;
  const PrefixMatch again_a = run_and_cache(kv, a);  // recomputed (b leaves for the host now)
  EXPECT_EQ(again_a.host_chunks + again_a.device_chunks, 0);
  ASSERT_EQ(kv.counters().demoted_chunks, 2);
  // b is on the host; workers that cannot take it back: recomputed, its host copy kept.
  workers_.fail_pushes = true;
  const int64_t failures_before = kv.counters().remote_failures;
  clock_ += 1;
  PrefixMatch failed = kv.match_prefix(1, b, 2);
  EXPECT_EQ(failed.host_chunks, 0);
  EXPECT_TRUE(failed.table.empty());  // recomputing a match's tail saves nothing: it is the caller's
  EXPECT_EQ(kv.counters().remote_failures, failures_before + 1);  // one push for both
  workers_.fail_pushes = false;
  clock_ += 1;
  const PrefixMatch back = run_and_cache(kv, b);
  EXPECT_EQ(back.host_chunks, 2);
}

}  // namespace
}  // namespace mnemo::testing

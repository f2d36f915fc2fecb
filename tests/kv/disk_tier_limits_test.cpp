// DiskTier's limits and its writer thread: capacity and queue refusals, removal ordered after a
// queued write, a key written twice, wrong sizes, open() errors, the destructor finishing queued
// writes, completions taken while another thread polls, and payloads encoded on the writer
// thread.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "kv/disk_tier.h"
#include "kv/disk_tier_test_support.h"

namespace mnemo {
namespace {

using namespace disk_tier_testing;  // NOLINT: the shared helpers
namespace fs = std::filesystem;
using ::testing::HasSubstr;

using disk_tier_testing::DiskTierTest;

TEST_F(DiskTierTest, WritesBeyondTheCapacityAreRefused) {
  const size_t extent = header_size(kTokens) + kPayload;
  const auto capacity = static_cast<int64_t>(3 * extent + extent / 2);
  auto tier = open(kFingerprint, kPayload, capacity);
  ASSERT_NE(tier, nullptr);
  for (uint64_t key = 1; key <= 3; ++key) {
    EXPECT_TRUE(tier->write(make_header(key, 0, 0), pattern(kPayload, 1))) << key;
    EXPECT_LE(tier->used_bytes(), capacity);
  }
  EXPECT_EQ(tier->used_bytes(), static_cast<int64_t>(3 * extent));
  EXPECT_FALSE(tier->write(make_header(4, 0, 0), pattern(kPayload, 4)));
  EXPECT_FALSE(tier->write(make_header(5, 0, 0, 0), pattern(kPayload, 5)));  // smaller, still too big
  EXPECT_EQ(tier->used_bytes(), static_cast<int64_t>(3 * extent));
  tier->flush();
  auto done = tier->take_completed();
  std::sort(done.begin(), done.end());
  EXPECT_EQ(done, (std::vector<std::pair<uint64_t, bool>>{{1, true}, {2, true}, {3, true}}));
  EXPECT_FALSE(fs::exists(path(4)));
  EXPECT_FALSE(fs::exists(path(5)));
  EXPECT_EQ(tier->used_bytes(), static_cast<int64_t>(3 * extent));

  // Room made by a removal is usable at once (the removal is queued, the bytes are free).
  tier->remove(2);
  EXPECT_EQ(tier->used_bytes(), static_cast<int64_t>(2 * extent));
  EXPECT_TRUE(tier->write(make_header(4, 0, 0), pattern(kPayload, 4)));
  EXPECT_FALSE(tier->write(make_header(6, 0, 0), pattern(kPayload, 6)));
  EXPECT_LE(tier->used_bytes(), capacity);
  tier->flush();
  EXPECT_EQ(list_dir(dir_.path), (std::vector<std::string>{name_of(1), name_of(3), name_of(4)}));

  // An extent larger than the whole capacity never fits.
  auto small = DiskTier::open(dir_.path + "/small", kFingerprint, kPayload, static_cast<int64_t>(extent) - 1);
  ASSERT_TRUE(small.ok());
  EXPECT_FALSE((*small)->write(make_header(1, 0, 0), pattern(kPayload, 1)));
  EXPECT_EQ((*small)->used_bytes(), 0);
}

TEST_F(DiskTierTest, RemoveAfterAQueuedWriteDeletesTheFile) {
  auto tier = open();
  ASSERT_NE(tier, nullptr);
  constexpr uint64_t kKeys = 40;
  for (uint64_t key = 1; key <= kKeys; ++key) {
    ASSERT_TRUE(tier->write(make_header(key, 0, 0), pattern(kPayload, static_cast<uint32_t>(key))));
    tier->remove(key);  // most of these land while the write is queued or being written
    EXPECT_EQ(tier->used_bytes(), 0);
  }
  tier->remove(kKeys + 1);  // unknown: a no-op
  tier->flush();
  EXPECT_EQ(tier->queued(), 0u);
  EXPECT_TRUE(list_dir(dir_.path).empty());
  EXPECT_EQ(tier->used_bytes(), 0);
  // Every write still completes exactly once.
  std::map<uint64_t, int> completions;
  for (const auto& [key, ok] : tier->take_completed()) ++completions[key];
  EXPECT_EQ(completions.size(), kKeys);
  for (const auto& [key, n] : completions) EXPECT_EQ(n, 1) << key;

  // Write, remove, write the same key again: the second write is the one that stays.
  ASSERT_TRUE(tier->write(make_header(99, 0, 0), pattern(kPayload, 1)));
  tier->remove(99);
  ASSERT_TRUE(tier->write(make_header(99, 0, 0), pattern(kPayload, 2)));
  tier->flush();
  EXPECT_EQ(list_dir(dir_.path), std::vector<std::string>{name_of(99)});
  std::vector<uint8_t> out(kPayload);
  ASSERT_TRUE(tier->read(99, out).ok());
  EXPECT_EQ(out, pattern(kPayload, 2));
  EXPECT_EQ(tier->used_bytes(), static_cast<int64_t>(tier->extent_bytes(kTokens)));
}

TEST_F(DiskTierTest, WritingTheSameKeyTwiceIsRefused) {
  auto tier = open();
  ASSERT_NE(tier, nullptr);
  ASSERT_TRUE(tier->write(make_header(8, 0, 0), pattern(kPayload, 1)));
  EXPECT_FALSE(tier->write(make_header(8, 0, 0), pattern(kPayload, 2)));  // while queued
  tier->flush();
  EXPECT_FALSE(tier->write(make_header(8, 0, 16), pattern(kPayload, 3)));  // once on disk
  tier->flush();
  EXPECT_EQ(tier->take_completed(), (std::vector<std::pair<uint64_t, bool>>{{8, true}}));
  EXPECT_EQ(tier->used_bytes(), static_cast<int64_t>(tier->extent_bytes(kTokens)));
  std::vector<uint8_t> out(kPayload);
  ASSERT_TRUE(tier->read(8, out).ok());
  EXPECT_EQ(out, pattern(kPayload, 1));
}

TEST_F(DiskTierTest, APayloadOfTheWrongSizeOrTooManyTokensIsRefused) {
  auto tier = open();
  ASSERT_NE(tier, nullptr);
  for (const size_t size : {size_t{0}, kPayload - 1, kPayload + 1, 2 * kPayload}) {
    EXPECT_FALSE(tier->write(make_header(1, 0, 0), pattern(size, 1))) << size;
  }
  EXPECT_FALSE(tier->write(make_header(2, 0, 0, (1 << 16) + 1), pattern(kPayload, 2)));
  EXPECT_EQ(tier->queued(), 0u);
  EXPECT_EQ(tier->used_bytes(), 0);
  tier->flush();
  EXPECT_TRUE(tier->take_completed().empty());
  EXPECT_TRUE(list_dir(dir_.path).empty());
  // The largest token count is accepted, and scanned back.
  const ExtentHeader big = make_header(3, 0, 0, 1 << 16);
  write_durably(*tier, big, pattern(kPayload, 3));
  tier.reset();
  auto again = open();
  ASSERT_NE(again, nullptr);
  const auto headers = again->scan();
  ASSERT_EQ(headers.size(), 1u);
  expect_same_header(headers[0], big);
}

TEST_F(DiskTierTest, OpenReportsAnUnusableDirectoryOrCapacity) {
  const std::string file = dir_.path + "/a-file";
  spit(file, {1});
  auto under_file = DiskTier::open(file + "/kv", kFingerprint, kPayload, 1 << 20);
  ASSERT_FALSE(under_file.ok());
  EXPECT_THAT(under_file.error().message(), HasSubstr(file + "/kv"));
  EXPECT_THAT(under_file.error().message(), HasSubstr("cannot create the directory"));

  auto is_file = DiskTier::open(file, kFingerprint, kPayload, 1 << 20);
  ASSERT_FALSE(is_file.ok());

  // Exists, but nothing can be created in it (root included).
  auto proc = DiskTier::open("/proc/self", kFingerprint, kPayload, 1 << 20);
  ASSERT_FALSE(proc.ok());
  EXPECT_THAT(proc.error().message(), HasSubstr("not writable"));

  for (const int64_t capacity : {int64_t{0}, int64_t{-1}}) {
    auto tier = DiskTier::open(dir_.path, kFingerprint, kPayload, capacity);
    ASSERT_FALSE(tier.ok()) << capacity;
    EXPECT_THAT(tier.error().message(), HasSubstr("capacity"));
  }
  EXPECT_EQ(list_dir(dir_.path), std::vector<std::string>{"a-file"});  // no probe left behind
}

TEST_F(DiskTierTest, TheDestructorFinishesQueuedWrites) {
  constexpr uint64_t kKeys = 50;
  {
    auto tier = open();
    ASSERT_NE(tier, nullptr);
    for (uint64_t key = 1; key <= kKeys; ++key) {
      ASSERT_TRUE(tier->write(make_header(key, key - 1, static_cast<int32_t>(16 * (key - 1))),
                              pattern(kPayload, static_cast<uint32_t>(key))));
    }
    tier->remove(kKeys);  // queued behind its write
  }
  const auto names = list_dir(dir_.path);
  ASSERT_EQ(names.size(), kKeys - 1);
  for (const auto& name : names) EXPECT_TRUE(name.ends_with(".kv")) << name;  // no temporaries
  auto tier = open();
  ASSERT_NE(tier, nullptr);
  const auto headers = tier->scan();
  ASSERT_EQ(headers.size(), kKeys - 1);
  for (size_t i = 0; i < headers.size(); ++i) {
    const uint64_t key = i + 1;  // sorted by position: the chain in order
    expect_same_header(headers[i], make_header(key, key - 1, static_cast<int32_t>(16 * (key - 1))));
    std::vector<uint8_t> out(kPayload);
    ASSERT_TRUE(tier->read(key, out).ok()) << key;
    EXPECT_EQ(out, pattern(kPayload, static_cast<uint32_t>(key)));
  }
}

TEST_F(DiskTierTest, EveryWriteCompletesExactlyOnceWhileAnotherThreadPolls) {
  constexpr uint64_t kKeys = 300;
  const auto capacity = static_cast<int64_t>(kKeys * (header_size(kTokens) + kPayload));
  auto tier = open(kFingerprint, kPayload, capacity);
  ASSERT_NE(tier, nullptr);
  std::atomic<bool> writes_done{false};
  std::atomic<bool> over_capacity{false};
  std::map<uint64_t, int> completions;
  std::vector<uint64_t> failed;
  std::thread poller([&] {
    const auto take = [&] {
      for (const auto& [key, ok] : tier->take_completed()) {
        ++completions[key];
        if (!ok) failed.push_back(key);
      }
    };
    while (!writes_done.load()) {
      take();
      if (tier->used_bytes() > capacity) over_capacity = true;
      (void)tier->queued();
      std::this_thread::yield();
    }
    take();
  });
  for (uint64_t key = 1; key <= kKeys; ++key) {
    EXPECT_TRUE(tier->write(make_header(key, 0, 0), pattern(kPayload, static_cast<uint32_t>(key)))) << key;
  }
  EXPECT_FALSE(tier->write(make_header(kKeys + 1, 0, 0), pattern(kPayload, 0)));  // full
  tier->flush();
  writes_done = true;
  poller.join();
  EXPECT_FALSE(over_capacity.load());
  EXPECT_TRUE(failed.empty());
  EXPECT_EQ(completions.size(), kKeys);
  for (uint64_t key = 1; key <= kKeys; ++key) EXPECT_EQ(completions[key], 1) << key;
  EXPECT_TRUE(tier->take_completed().empty());
  EXPECT_EQ(tier->used_bytes(), capacity);
  EXPECT_EQ(list_dir(dir_.path).size(), kKeys);
  std::vector<uint8_t> out(kPayload);
  for (const uint64_t key : {uint64_t{1}, kKeys / 2, kKeys}) {
    ASSERT_TRUE(tier->read(key, out).ok()) << key;
    EXPECT_EQ(out, pattern(kPayload, static_cast<uint32_t>(key)));
  }
}

// A payload made from its source on the writer thread (KvCache's conversion to the disk's
// element type): the caller's source is copied at write(), the encoder runs on another thread,
// and the extent holds what it made, with checksums read() accepts.
TEST_F(DiskTierTest, APayloadIsEncodedOnTheWriterThread) {
  auto tier = open();
  ASSERT_NE(tier, nullptr);
  std::vector<uint8_t> source = pattern(2 * kPayload, 4);
  const std::vector<uint8_t> original = source;
  std::atomic<std::thread::id> encoded_on{};
  const auto halve = [&](std::span<const uint8_t> in, std::span<uint8_t> out) {
    encoded_on = std::this_thread::get_id();
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<uint8_t>(in[2 * i] ^ in[2 * i + 1]);
  };
  ASSERT_TRUE(tier->write(make_header(41, 0, 0), source, kPayload, halve));
  std::fill(source.begin(), source.end(), 0);  // the tier holds its own copy
  tier->flush();
  EXPECT_NE(encoded_on.load(), std::this_thread::get_id());
  EXPECT_EQ(tier->take_completed(), (std::vector<std::pair<uint64_t, bool>>{{41, true}}));
  std::vector<uint8_t> out(kPayload, 0);
  const Status read = tier->read(41, out);
  ASSERT_TRUE(read.ok()) << read.error().message();
  for (size_t i = 0; i < kPayload; ++i) {
    ASSERT_EQ(out[i], static_cast<uint8_t>(original[2 * i] ^ original[2 * i + 1])) << i;
  }
  // A payload size the tier does not hold is refused with or without an encoder; without one the
  // source is the payload and must have its size.
  EXPECT_FALSE(tier->write(make_header(42, 0, 0), original, kPayload + 1, halve));
  EXPECT_FALSE(tier->write(make_header(43, 0, 0), original, kPayload, {}));
  EXPECT_TRUE(tier->write(make_header(44, 0, 0), std::span(original).first(kPayload), kPayload, {}));
}

}  // namespace
}  // namespace mnemo

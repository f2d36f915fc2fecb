// DiskTier (kv/disk_tier.h) against a real directory: exact bytes back from durable writes,
// headers rebuilt by scan() parents first, damaged extents (payload flips fail read(); header
// flips and truncations make scan() delete them), leftover temporaries, other fingerprints left
// alone, capacity and queue refusals, removal ordered after a queued write, open() errors, the
// destructor finishing queued writes, and completions taken from another thread. Also: a second
// scan counts nothing twice, and a directory named with a trailing '/' keeps its extents.
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

TEST_F(DiskTierTest, WriteFlushCompleteAndReadBackTheSameBytes) {
  auto tier = open();
  ASSERT_NE(tier, nullptr);
  EXPECT_EQ(tier->dir(), dir_.path);
  EXPECT_EQ(tier->payload_bytes(), kPayload);
  EXPECT_EQ(tier->capacity_bytes(), int64_t{1} << 20);
  EXPECT_EQ(tier->extent_bytes(kTokens), header_size(kTokens) + kPayload);
  EXPECT_EQ(tier->used_bytes(), 0);
  EXPECT_TRUE(tier->take_completed().empty());

  const ExtentHeader h = make_header(0xabcdef, 0, 0);
  const auto payload = pattern(kPayload, 1);
  ASSERT_TRUE(tier->write(h, payload));
  EXPECT_EQ(tier->used_bytes(), static_cast<int64_t>(tier->extent_bytes(kTokens)));  // counted while queued
  tier->flush();
  EXPECT_EQ(tier->queued(), 0u);
  const auto done = tier->take_completed();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0], (std::pair<uint64_t, bool>{0xabcdef, true}));
  EXPECT_TRUE(tier->take_completed().empty());  // taken once

  EXPECT_EQ(tier->path_of(0xabcdef), dir_.path + "/0000000000abcdef.kv");
  EXPECT_EQ(list_dir(dir_.path), std::vector<std::string>{"0000000000abcdef.kv"});
  EXPECT_EQ(fs::file_size(tier->path_of(0xabcdef)), tier->extent_bytes(kTokens));
  const auto on_disk = slurp(tier->path_of(0xabcdef));
  EXPECT_EQ(std::vector<uint8_t>(on_disk.end() - static_cast<std::ptrdiff_t>(kPayload), on_disk.end()), payload);

  std::vector<uint8_t> out(kPayload, 0);
  const Status read = tier->read(0xabcdef, out);
  ASSERT_TRUE(read.ok()) << read.error().message();
  EXPECT_EQ(out, payload);
  EXPECT_EQ(tier->used_bytes(), static_cast<int64_t>(tier->extent_bytes(kTokens)));
}

TEST_F(DiskTierTest, ExtentSizeFollowsTheTokenCount) {
  auto tier = open();
  ASSERT_NE(tier, nullptr);
  int64_t used = 0;
  for (const int n : {0, 1, 16, 257}) {
    const ExtentHeader h = make_header(100 + static_cast<uint64_t>(n), 0, 0, n);
    write_durably(*tier, h, pattern(kPayload, static_cast<uint32_t>(n)));
    EXPECT_EQ(tier->extent_bytes(static_cast<size_t>(n)), header_size(static_cast<size_t>(n)) + kPayload);
    EXPECT_EQ(fs::file_size(tier->path_of(h.key)), tier->extent_bytes(static_cast<size_t>(n)));
    used += static_cast<int64_t>(tier->extent_bytes(static_cast<size_t>(n)));
    EXPECT_EQ(tier->used_bytes(), used);
  }
  tier.reset();
  auto again = open();
  ASSERT_NE(again, nullptr);
  const auto headers = again->scan();
  ASSERT_EQ(headers.size(), 4u);
  std::map<uint64_t, ExtentHeader> by_key;
  for (const auto& h : headers) by_key[h.key] = h;
  for (const int n : {0, 1, 16, 257}) {
    const uint64_t key = 100 + static_cast<uint64_t>(n);
    ASSERT_EQ(by_key.count(key), 1u);
    expect_same_header(by_key[key], make_header(key, 0, 0, n));
    std::vector<uint8_t> out(kPayload);
    ASSERT_TRUE(again->read(key, out).ok());
    EXPECT_EQ(out, pattern(kPayload, static_cast<uint32_t>(n)));
  }
  EXPECT_EQ(again->used_bytes(), used);
}

TEST_F(DiskTierTest, AnExtentWithNoTokensAndNoPayloadRoundTrips) {
  {
    auto tier = open(kFingerprint, 0);
    ASSERT_NE(tier, nullptr);
    write_durably(*tier, make_header(3, 0, 0, 0), {});
    EXPECT_EQ(fs::file_size(tier->path_of(3)), header_size(0));
    EXPECT_TRUE(tier->read(3, {}).ok());
  }
  auto tier = open(kFingerprint, 0);
  ASSERT_NE(tier, nullptr);
  const auto headers = tier->scan();
  ASSERT_EQ(headers.size(), 1u);
  expect_same_header(headers[0], make_header(3, 0, 0, 0));
  EXPECT_TRUE(tier->read(3, {}).ok());
  // Extents of another payload size are damaged ones for this tier.
  auto bigger = open(kFingerprint, 1);
  ASSERT_NE(bigger, nullptr);
  EXPECT_TRUE(bigger->scan().empty());
  EXPECT_FALSE(fs::exists(tier->path_of(3)));
}

TEST_F(DiskTierTest, ScanRebuildsTheHeadersParentsBeforeChildren) {
  // Two sequences in two namespaces, written children first.
  const std::vector<ExtentHeader> written = {
      make_header(13, 12, 32, kTokens, 7), make_header(12, 11, 16, kTokens, 7), make_header(11, 0, 0, kTokens, 7),
      make_header(22, 21, 16, kTokens, 9), make_header(21, 0, 0, kTokens, 9),  make_header(14, 13, 48, kTokens, 7),
  };
  {
    auto tier = open();
    ASSERT_NE(tier, nullptr);
    for (size_t i = 0; i < written.size(); ++i) ASSERT_TRUE(tier->write(written[i], pattern(kPayload, static_cast<uint32_t>(i))));
    tier->flush();
    EXPECT_EQ(tier->take_completed().size(), written.size());
  }
  auto tier = open();
  ASSERT_NE(tier, nullptr);
  EXPECT_EQ(tier->used_bytes(), 0);  // nothing known before the scan
  const auto headers = tier->scan();
  ASSERT_EQ(headers.size(), written.size());
  EXPECT_EQ(tier->used_bytes(), static_cast<int64_t>(written.size() * tier->extent_bytes(kTokens)));
  EXPECT_TRUE(tier->take_completed().empty());  // a scan completes no write

  // Sorted by position, and so every parent before its children.
  for (size_t i = 1; i < headers.size(); ++i) EXPECT_LE(headers[i - 1].position, headers[i].position);
  std::map<uint64_t, size_t> index_of;
  for (size_t i = 0; i < headers.size(); ++i) index_of[headers[i].key] = i;
  ASSERT_EQ(index_of.size(), written.size());
  for (size_t i = 0; i < written.size(); ++i) {
    const ExtentHeader& want = written[i];
    const ExtentHeader& got = headers[index_of.at(want.key)];
    expect_same_header(got, want);
    if (want.parent_key != 0) {
      EXPECT_LT(index_of.at(want.parent_key), index_of.at(want.key));
    }
    std::vector<uint8_t> out(kPayload);
    const Status read = tier->read(want.key, out);
    ASSERT_TRUE(read.ok()) << read.error().message();
    EXPECT_EQ(out, pattern(kPayload, static_cast<uint32_t>(i)));
  }
  // The scanned extents are known: writing one again is refused, removing one deletes it.
  EXPECT_FALSE(tier->write(written[0], pattern(kPayload, 0)));
  tier->remove(written[0].key);
  tier->flush();
  EXPECT_FALSE(fs::exists(tier->path_of(written[0].key)));
  EXPECT_EQ(tier->used_bytes(), static_cast<int64_t>((written.size() - 1) * tier->extent_bytes(kTokens)));
}

TEST_F(DiskTierTest, ScanningTwiceCountsEachExtentOnce) {
  auto tier = open();
  ASSERT_NE(tier, nullptr);
  write_durably(*tier, make_header(1, 0, 0), pattern(kPayload, 1));
  write_durably(*tier, make_header(2, 1, 16), pattern(kPayload, 2));
  const auto used = static_cast<int64_t>(2 * tier->extent_bytes(kTokens));
  EXPECT_EQ(tier->used_bytes(), used);
  EXPECT_EQ(tier->scan().size(), 2u);  // the tier's own extents
  EXPECT_EQ(tier->used_bytes(), used);
  EXPECT_EQ(tier->scan().size(), 2u);
  EXPECT_EQ(tier->used_bytes(), used);
  tier->remove(1);
  tier->remove(2);
  tier->flush();
  EXPECT_EQ(tier->used_bytes(), 0);
  EXPECT_TRUE(list_dir(dir_.path).empty());
}

TEST_F(DiskTierTest, ADirectoryWithATrailingSlashKeepsItsExtents) {
  {
    auto tier = DiskTier::open(dir_.path + "/", kFingerprint, kPayload, 1 << 20);
    ASSERT_TRUE(tier.ok()) << tier.error().message();
    write_durably(**tier, make_header(5, 0, 0), pattern(kPayload, 5));
  }
  auto tier = DiskTier::open(dir_.path + "/", kFingerprint, kPayload, 1 << 20);
  ASSERT_TRUE(tier.ok()) << tier.error().message();
  const auto headers = (*tier)->scan();
  ASSERT_EQ(headers.size(), 1u);
  expect_same_header(headers[0], make_header(5, 0, 0));
  EXPECT_EQ(list_dir(dir_.path), std::vector<std::string>{name_of(5)});
  std::vector<uint8_t> out(kPayload);
  ASSERT_TRUE((*tier)->read(5, out).ok());
  EXPECT_EQ(out, pattern(kPayload, 5));
}

TEST_F(DiskTierTest, AFlippedPayloadByteFailsReadButScanStillListsIt) {
  const ExtentHeader h = make_header(77, 0, 0);
  const auto payload = pattern(kPayload, 77);
  {
    auto tier = open();
    ASSERT_NE(tier, nullptr);
    write_durably(*tier, h, payload);
  }
  const auto original = slurp(path(77));
  ASSERT_EQ(original.size(), header_size(kTokens) + kPayload);
  for (const size_t at : {size_t{0}, kPayload / 2, kPayload - 1}) {
    SCOPED_TRACE("payload byte " + std::to_string(at));
    auto damaged = original;
    damaged[header_size(kTokens) + at] ^= 0x10;
    spit(path(77), damaged);
    auto tier = open();
    ASSERT_NE(tier, nullptr);
    std::vector<uint8_t> out(kPayload);
    const Status read = tier->read(77, out);
    ASSERT_FALSE(read.ok());
    EXPECT_THAT(read.error().message(), HasSubstr("checksum"));
    EXPECT_THAT(read.error().message(), HasSubstr(path(77)));
    // The header is intact: scan lists it (the damage is found, and reported, on read).
    const auto headers = tier->scan();
    ASSERT_EQ(headers.size(), 1u);
    expect_same_header(headers[0], h);
    EXPECT_TRUE(fs::exists(path(77)));
    EXPECT_FALSE(tier->read(77, out).ok());
  }
}

TEST_F(DiskTierTest, AFlippedHeaderByteMakesScanDeleteIt) {
  // A sequence's first chunk: a child whose parent has no extent would be an orphan, never listed.
  const ExtentHeader h = make_header(0x5151, 0, 16);
  {
    auto tier = open();
    ASSERT_NE(tier, nullptr);
    write_durably(*tier, h, pattern(kPayload, 3));
  }
  const auto original = slurp(path(0x5151));
  const size_t head = header_size(kTokens);
  ASSERT_EQ(original.size(), head + kPayload);
  const size_t payload_hash_at = head - 16;  // the trailer's payload checksum: not in the header checksum
  for (size_t at = 0; at < head; ++at) {
    for (const uint8_t bit : {uint8_t{0x01}, uint8_t{0x80}}) {
      SCOPED_TRACE("header byte " + std::to_string(at) + " ^ " + std::to_string(bit));
      auto damaged = original;
      damaged[at] ^= bit;
      spit(path(0x5151), damaged);
      auto tier = open();
      ASSERT_NE(tier, nullptr);
      std::vector<uint8_t> out(kPayload);
      EXPECT_FALSE(tier->read(0x5151, out).ok());
      const auto headers = tier->scan();
      if (at >= payload_hash_at && at < payload_hash_at + 8) {
        // A damaged payload checksum reads as a damaged payload.
        ASSERT_EQ(headers.size(), 1u);
        const Status read = tier->read(0x5151, out);
        ASSERT_FALSE(read.ok());
        EXPECT_THAT(read.error().message(), HasSubstr("checksum"));
        continue;
      }
      // Everywhere else (the fingerprint included: a damaged one is no other model's) it is gone.
      EXPECT_TRUE(headers.empty());
      EXPECT_FALSE(fs::exists(path(0x5151)));
      EXPECT_EQ(tier->used_bytes(), 0);
    }
  }
}

TEST_F(DiskTierTest, ATruncatedExtentIsDroppedByScan) {
  {
    auto tier = open();
    ASSERT_NE(tier, nullptr);
    write_durably(*tier, make_header(9, 0, 0), pattern(kPayload, 9));
  }
  const auto original = slurp(path(9));
  const size_t head = header_size(kTokens);
  const size_t whole = head + kPayload;
  ASSERT_EQ(original.size(), whole);
  for (const size_t length : {size_t{0}, size_t{1}, size_t{8}, kPrefixBytes - 1, kPrefixBytes, kPrefixBytes + 5,
                              head - kTrailerBytes, head - 1, head, head + 1, head + kPayload / 2, whole - 1}) {
    SCOPED_TRACE("truncated to " + std::to_string(length));
    spit(path(9), std::vector<uint8_t>(original.begin(), original.begin() + static_cast<std::ptrdiff_t>(length)));
    auto tier = open();
    ASSERT_NE(tier, nullptr);
    std::vector<uint8_t> out(kPayload);
    EXPECT_FALSE(tier->read(9, out).ok());
    EXPECT_TRUE(tier->scan().empty());
    EXPECT_FALSE(fs::exists(path(9)));
    EXPECT_EQ(tier->used_bytes(), 0);
  }
  // Too long is as wrong as too short.
  auto longer = original;
  longer.push_back(0);
  spit(path(9), longer);
  auto tier = open();
  ASSERT_NE(tier, nullptr);
  EXPECT_TRUE(tier->scan().empty());
  EXPECT_FALSE(fs::exists(path(9)));
}

TEST_F(DiskTierTest, ScanDeletesTemporariesStrayExtentsAndLeavesOtherFilesAlone) {
  {
    auto tier = open();
    ASSERT_NE(tier, nullptr);
    write_durably(*tier, make_header(1, 0, 0), pattern(kPayload, 1));
  }
  const auto valid = slurp(path(1));
  spit(path(1) + ".tmp", valid);                      // a whole extent, but never renamed: gone
  spit(path(2) + ".tmp", {1, 2, 3});                  // a write cut short
  spit(dir_.path + "/other.tmp", {4});                // any temporary
  spit(path(3), valid);                               // key 1's extent under key 3's name
  spit(dir_.path + "/junk.kv", {'n', 'o', 't'});      // not an extent
  spit(dir_.path + "/notes.txt", {'h', 'i'});         // not ours: stays
  fs::create_directory(dir_.path + "/sub.kv");        // not a file: stays
  auto tier = open();
  ASSERT_NE(tier, nullptr);
  const auto headers = tier->scan();
  ASSERT_EQ(headers.size(), 1u);
  expect_same_header(headers[0], make_header(1, 0, 0));
  EXPECT_EQ(list_dir(dir_.path), (std::vector<std::string>{name_of(1), "notes.txt", "sub.kv"}));
  EXPECT_EQ(tier->used_bytes(), static_cast<int64_t>(valid.size()));
}

TEST_F(DiskTierTest, ReadReportsWhatIsWrong) {
  auto tier = open();
  ASSERT_NE(tier, nullptr);
  std::vector<uint8_t> out(kPayload);
  const Status missing = tier->read(42, out);
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.error().message(), HasSubstr("missing"));

  write_durably(*tier, make_header(1, 0, 0), pattern(kPayload, 1));
  std::vector<uint8_t> wrong(kPayload - 1);
  const Status wrong_size = tier->read(1, wrong);
  ASSERT_FALSE(wrong_size.ok());
  EXPECT_THAT(wrong_size.error().message(), HasSubstr("extents hold 96"));

  // Key 1's extent under key 2's name is not key 2's.
  fs::copy_file(path(1), path(2));
  const Status foreign = tier->read(2, out);
  ASSERT_FALSE(foreign.ok());
  EXPECT_THAT(foreign.error().message(), HasSubstr("holds key 0000000000000001"));
}

TEST_F(DiskTierTest, AnExtentOfAnotherFingerprintIsLeftOnDiskButNotListed) {
  {
    auto tier = open(kFingerprint);
    ASSERT_NE(tier, nullptr);
    write_durably(*tier, make_header(5, 0, 0), pattern(kPayload, 5));
  }
  const auto bytes = slurp(path(5));
  {
    auto other = open(kFingerprint + 1);
    ASSERT_NE(other, nullptr);
    EXPECT_TRUE(other->scan().empty());
    EXPECT_EQ(other->used_bytes(), 0);
    std::vector<uint8_t> out(kPayload);
    const Status read = other->read(5, out);
    ASSERT_FALSE(read.ok());
    EXPECT_THAT(read.error().message(), HasSubstr("another model"));
    other->remove(5);  // not its extent: a no-op
    other->flush();
  }
  EXPECT_EQ(slurp(path(5)), bytes);
  auto tier = open(kFingerprint);
  ASSERT_NE(tier, nullptr);
  const auto headers = tier->scan();
  ASSERT_EQ(headers.size(), 1u);
  expect_same_header(headers[0], make_header(5, 0, 0));
}

TEST(KvFingerprint, ChangesWithTheModelAndEveryLayoutField) {
  const uint64_t base = kv_fingerprint("model-a", 32, 8, 128, 128, 16, 1);
  EXPECT_EQ(base, kv_fingerprint("model-a", 32, 8, 128, 128, 16, 1));
  const std::set<uint64_t> variants = {
      base,
      kv_fingerprint("model-b", 32, 8, 128, 128, 16, 1),
      kv_fingerprint("model-a", 33, 8, 128, 128, 16, 1),
      kv_fingerprint("model-a", 32, 9, 128, 128, 16, 1),
      kv_fingerprint("model-a", 32, 8, 64, 128, 16, 1),
      kv_fingerprint("model-a", 32, 8, 128, 64, 16, 1),
      kv_fingerprint("model-a", 32, 8, 128, 128, 32, 1),
      kv_fingerprint("model-a", 32, 8, 128, 128, 16, 0),
      kv_fingerprint("", 32, 8, 128, 128, 16, 1),
  };
  EXPECT_EQ(variants.size(), 9u);
}

}  // namespace
}  // namespace mnemo

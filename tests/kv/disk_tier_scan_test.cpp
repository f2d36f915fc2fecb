// DiskTier::scan() at start-up: every extent it drops is counted by reason (header checksum,
// malformed) and logged in one line; intact extents below a damaged or missing one are orphans,
// kept on disk but not listed, listed again once their parent is back, and the first to go when a
// write needs room; a parent whose payload (not header) is damaged keeps its children listed.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "kv/disk_tier.h"
#include "kv/disk_tier_test_support.h"

namespace mnemo {
namespace {

using namespace disk_tier_testing;  // NOLINT: the shared helpers
namespace fs = std::filesystem;
using ::testing::HasSubstr;

class DiskTierScanTest : public ::testing::Test {
 protected:
  TempDir dir_;
  const int64_t extent_ = static_cast<int64_t>(header_size(kTokens) + kPayload);

  std::unique_ptr<DiskTier> open(int64_t capacity = int64_t{1} << 20, uint64_t fingerprint = kFingerprint) {
    auto tier = DiskTier::open(dir_.path, fingerprint, kPayload, capacity);
    EXPECT_TRUE(tier.ok()) << tier.error().message();
    return tier.ok() ? std::move(*tier) : nullptr;
  }

  // Writes the extents durably, each with the payload pattern of its key.
  void write_all(const std::vector<ExtentHeader>& headers, uint64_t fingerprint = kFingerprint) {
    auto tier = open(int64_t{1} << 20, fingerprint);
    ASSERT_NE(tier, nullptr);
    for (const ExtentHeader& h : headers) ASSERT_TRUE(tier->write(h, pattern(kPayload, static_cast<uint32_t>(h.key))));
    tier->flush();
    for (const auto& [key, ok] : tier->take_completed()) ASSERT_TRUE(ok) << key;
  }

  std::string path(uint64_t key) const { return dir_.path + "/" + name_of(key); }

  // Flips one bit of a token: the header checksum no longer matches.
  void damage_header(uint64_t key) const {
    auto bytes = slurp(path(key));
    bytes[kPrefixBytes] ^= 0x04;
    spit(path(key), bytes);
  }

  static std::vector<uint64_t> keys_of(const std::vector<ExtentHeader>& headers) {
    std::vector<uint64_t> keys;
    for (const ExtentHeader& h : headers) keys.push_back(h.key);
    return keys;
  }

  // Scans, returning the listed keys (in scan order) and what scan() wrote to stderr.
  static std::vector<uint64_t> scan(DiskTier& tier, std::string* log = nullptr) {
    ::testing::internal::CaptureStderr();
    const auto headers = tier.scan();
    const std::string err = ::testing::internal::GetCapturedStderr();
    if (log != nullptr) *log = err;
    return keys_of(headers);
  }
};

TEST_F(DiskTierScanTest, EveryDroppedExtentIsCountedByReasonAndLoggedOnce) {
  // One sequence 1 -> 2 -> 3 with a branch 1 -> 4; extent 5 to truncate; 6 of another model.
  write_all({make_header(1, 0, 0), make_header(2, 1, 1), make_header(3, 2, 2), make_header(4, 1, 1),
             make_header(5, 0, 0)});
  write_all({make_header(6, 0, 0)}, kFingerprint + 1);
  damage_header(2);                                         // header checksum: 3 becomes an orphan
  const auto five = slurp(path(5));
  spit(path(5), std::vector<uint8_t>(five.begin(), five.begin() + 30));  // truncated: malformed
  spit(path(7), slurp(path(1)));                            // key 1's extent under key 7's name: malformed
  spit(dir_.path + "/junk.kv", {'n', 'o'});                 // not an extent: malformed
  spit(path(8) + ".tmp", {1, 2, 3});                        // interrupted writes
  spit(dir_.path + "/x.tmp", {4});
  spit(dir_.path + "/notes.txt", {'h', 'i'});               // not the tier's: not counted

  auto tier = open();
  ASSERT_NE(tier, nullptr);
  std::string log;
  EXPECT_EQ(scan(*tier, &log), (std::vector<uint64_t>{1, 4}));

  const DiskTier::Stats stats = tier->stats();
  EXPECT_EQ(stats.last_scan.scanned, 8);  // 1..7 and junk.kv
  EXPECT_EQ(stats.last_scan.kept, 2);
  EXPECT_EQ(stats.last_scan.dropped_corrupt, 1);
  EXPECT_EQ(stats.last_scan.dropped_malformed, 3);
  EXPECT_EQ(stats.last_scan.orphaned, 1);
  EXPECT_EQ(stats.last_scan.foreign, 1);
  EXPECT_EQ(stats.last_scan.temporaries, 2);
  EXPECT_EQ(stats.orphans, 1);
  EXPECT_EQ(stats.orphan_bytes, extent_);
  EXPECT_EQ(stats.orphans_reclaimed, 0);
  EXPECT_EQ(tier->used_bytes(), 2 * extent_);  // the orphan is not the index's
  EXPECT_EQ(list_dir(dir_.path), (std::vector<std::string>{name_of(1), name_of(3), name_of(4), name_of(6), "notes.txt"}));

  // One line, with the counts and the first problem met (directory order decides which).
  ASSERT_EQ(std::count(log.begin(), log.end(), '\n'), 1) << log;
  EXPECT_THAT(log, ::testing::StartsWith("mnemo: " + describe_scan(dir_.path, stats.last_scan) + "; first: "));
  EXPECT_THAT(log, HasSubstr(dir_.path + "/"));
}

TEST_F(DiskTierScanTest, TheSummaryLineNamesEveryCount) {
  DiskTier::ScanStats s;
  s.scanned = 12;
  s.kept = 7;
  s.dropped_corrupt = 1;
  s.dropped_malformed = 2;
  s.orphaned = 1;
  s.foreign = 1;
  s.temporaries = 3;
  EXPECT_EQ(describe_scan("/var/kv", s),
            "KV disk tier /var/kv: extents scanned 12: kept 7, dropped 1 (header checksum) + 2 (malformed), "
            "orphaned 1 (kept on disk, not indexed: an earlier chunk's extent is missing or damaged), "
            "another model's 1 (left alone); interrupted writes deleted 3");
}

TEST_F(DiskTierScanTest, AnEmptyDirectoryLogsZeroes) {
  auto tier = open();
  ASSERT_NE(tier, nullptr);
  std::string log;
  EXPECT_TRUE(scan(*tier, &log).empty());
  EXPECT_EQ(log, "mnemo: " + describe_scan(dir_.path, {}) + "\n");
  EXPECT_EQ(tier->stats().last_scan.scanned, 0);
}

TEST_F(DiskTierScanTest, TheUndamagedDescendantsOfADamagedExtentStayOnDisk) {
  // 1 -> 2 -> 3 -> 4 and 2 -> 5: damaging 2 orphans 3, 4 and 5 (4 through 3).
  write_all({make_header(1, 0, 0), make_header(2, 1, 1), make_header(3, 2, 2), make_header(4, 3, 3),
             make_header(5, 2, 2)});
  damage_header(2);
  {
    auto tier = open();
    ASSERT_NE(tier, nullptr);
    EXPECT_EQ(scan(*tier), (std::vector<uint64_t>{1}));
    const DiskTier::Stats stats = tier->stats();
    EXPECT_EQ(stats.last_scan.scanned, 5);
    EXPECT_EQ(stats.last_scan.kept, 1);
    EXPECT_EQ(stats.last_scan.dropped_corrupt, 1);
    EXPECT_EQ(stats.last_scan.orphaned, 3);
    EXPECT_EQ(stats.orphans, 3);
    EXPECT_EQ(stats.orphan_bytes, 3 * extent_);
    EXPECT_EQ(tier->used_bytes(), extent_);
    EXPECT_EQ(list_dir(dir_.path), (std::vector<std::string>{name_of(1), name_of(3), name_of(4), name_of(5)}));
    // Unlisted, not unreadable: the bytes are whole.
    std::vector<uint8_t> out(kPayload);
    ASSERT_TRUE(tier->read(4, out).ok());
    EXPECT_EQ(out, pattern(kPayload, 4));

    // The chunk is computed again and written back under the same key (keys name the path).
    ASSERT_TRUE(tier->write(make_header(2, 1, 1), pattern(kPayload, 2)));
    tier->flush();
    EXPECT_EQ(tier->take_completed(), (std::vector<std::pair<uint64_t, bool>>{{2, true}}));
  }
  // The next start-up lists the whole tree again.
  auto tier = open();
  ASSERT_NE(tier, nullptr);
  auto keys = scan(*tier);  // by position: 3 and 5 share one, in directory order
  ASSERT_EQ(keys.size(), 5u);
  std::sort(keys.begin() + 2, keys.begin() + 4);
  EXPECT_EQ(keys, (std::vector<uint64_t>{1, 2, 3, 5, 4}));
  const DiskTier::Stats stats = tier->stats();
  EXPECT_EQ(stats.last_scan.kept, 5);
  EXPECT_EQ(stats.last_scan.orphaned, 0);
  EXPECT_EQ(stats.orphans, 0);
  EXPECT_EQ(stats.orphan_bytes, 0);
  EXPECT_EQ(tier->used_bytes(), 5 * extent_);
  for (const uint64_t key : {3, 4, 5}) {
    std::vector<uint8_t> out(kPayload);
    ASSERT_TRUE(tier->read(key, out).ok()) << key;
    EXPECT_EQ(out, pattern(kPayload, static_cast<uint32_t>(key)));
  }
}

TEST_F(DiskTierScanTest, AnExtentWhoseParentWasNeverWrittenIsAnOrphanToo) {
  // The engine evicts a parent's extent and keeps its child's: after a restart the child cannot
  // be reached, but it is no damage.
  write_all({make_header(1, 0, 0), make_header(2, 1, 1), make_header(3, 2, 2)});
  fs::remove(path(1));
  auto tier = open();
  ASSERT_NE(tier, nullptr);
  EXPECT_TRUE(scan(*tier).empty());
  const DiskTier::Stats stats = tier->stats();
  EXPECT_EQ(stats.last_scan.scanned, 2);
  EXPECT_EQ(stats.last_scan.dropped_corrupt + stats.last_scan.dropped_malformed, 0);
  EXPECT_EQ(stats.last_scan.orphaned, 2);
  EXPECT_EQ(list_dir(dir_.path), (std::vector<std::string>{name_of(2), name_of(3)}));
}

TEST_F(DiskTierScanTest, ADamagedPayloadKeepsItsChildrenListed) {
  // The header is intact: the index rebuilds the path, the damage is found on read, and the
  // chunk is recomputed while its children's KV is reused.
  write_all({make_header(1, 0, 0), make_header(2, 1, 1)});
  auto bytes = slurp(path(1));
  bytes.back() ^= 0x01;
  spit(path(1), bytes);
  auto tier = open();
  ASSERT_NE(tier, nullptr);
  EXPECT_EQ(scan(*tier), (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(tier->stats().last_scan.kept, 2);
  EXPECT_EQ(tier->stats().last_scan.orphaned, 0);
  std::vector<uint8_t> out(kPayload);
  EXPECT_FALSE(tier->read(1, out).ok());
  ASSERT_TRUE(tier->read(2, out).ok());
  EXPECT_EQ(out, pattern(kPayload, 2));
}

TEST_F(DiskTierScanTest, OrphansGiveWayToNewExtentsDeepestFirst) {
  // Orphans 2 (position 1), 3 (2), 4 (3) below a missing 1; room for 4 extents in all.
  write_all({make_header(1, 0, 0), make_header(2, 1, 1), make_header(3, 2, 2), make_header(4, 3, 3)});
  fs::remove(path(1));
  auto tier = open(4 * extent_);
  ASSERT_NE(tier, nullptr);
  EXPECT_TRUE(scan(*tier).empty());
  EXPECT_EQ(tier->stats().orphans, 3);

  // The first write fits beside them; the next two each take the deepest orphan's place.
  for (const uint64_t key : {10, 11, 12}) ASSERT_TRUE(tier->write(make_header(key, 0, 0), pattern(kPayload, 1))) << key;
  tier->flush();
  DiskTier::Stats stats = tier->stats();
  EXPECT_EQ(stats.orphans, 1);
  EXPECT_EQ(stats.orphan_bytes, extent_);
  EXPECT_EQ(stats.orphans_reclaimed, 2);
  EXPECT_EQ(stats.last_scan.orphaned, 3);  // what the scan found stays as it was
  EXPECT_EQ(tier->used_bytes(), 3 * extent_);
  EXPECT_EQ(list_dir(dir_.path), (std::vector<std::string>{name_of(2), name_of(10), name_of(11), name_of(12)}));

  ASSERT_TRUE(tier->write(make_header(13, 0, 0), pattern(kPayload, 1)));
  EXPECT_FALSE(tier->write(make_header(14, 0, 0), pattern(kPayload, 1)));  // no orphan left to give way
  tier->flush();
  stats = tier->stats();
  EXPECT_EQ(stats.orphans, 0);
  EXPECT_EQ(stats.orphan_bytes, 0);
  EXPECT_EQ(stats.orphans_reclaimed, 3);
  EXPECT_EQ(list_dir(dir_.path), (std::vector<std::string>{name_of(10), name_of(11), name_of(12), name_of(13)}));
}

TEST_F(DiskTierScanTest, WritingAnOrphansKeyReplacesItAndRemovingOneDeletesIt) {
  write_all({make_header(1, 0, 0), make_header(2, 1, 1), make_header(3, 1, 1)});
  fs::remove(path(1));
  auto tier = open();
  ASSERT_NE(tier, nullptr);
  EXPECT_TRUE(scan(*tier).empty());
  ASSERT_EQ(tier->stats().orphans, 2);

  // Not refused as a second extent of the key: the new one takes over (and is the index's).
  ASSERT_TRUE(tier->write(make_header(2, 0, 0), pattern(kPayload, 99)));
  tier->flush();
  EXPECT_EQ(tier->take_completed(), (std::vector<std::pair<uint64_t, bool>>{{2, true}}));
  std::vector<uint8_t> out(kPayload);
  ASSERT_TRUE(tier->read(2, out).ok());
  EXPECT_EQ(out, pattern(kPayload, 99));
  EXPECT_EQ(tier->used_bytes(), extent_);
  EXPECT_EQ(tier->stats().orphans, 1);
  EXPECT_EQ(tier->stats().orphans_reclaimed, 0);

  tier->remove(3);
  tier->flush();
  EXPECT_EQ(tier->stats().orphans, 0);
  EXPECT_EQ(tier->stats().orphan_bytes, 0);
  EXPECT_EQ(list_dir(dir_.path), std::vector<std::string>{name_of(2)});
}

TEST_F(DiskTierScanTest, ScanningTwiceCountsTheSameOrphansOnce) {
  write_all({make_header(1, 0, 0), make_header(2, 1, 1), make_header(5, 4, 1)});
  auto tier = open();
  ASSERT_NE(tier, nullptr);
  EXPECT_EQ(scan(*tier), (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(scan(*tier), (std::vector<uint64_t>{1, 2}));
  const DiskTier::Stats stats = tier->stats();
  EXPECT_EQ(stats.last_scan.scanned, 3);
  EXPECT_EQ(stats.last_scan.kept, 2);
  EXPECT_EQ(stats.last_scan.orphaned, 1);
  EXPECT_EQ(stats.orphans, 1);
  EXPECT_EQ(stats.orphan_bytes, extent_);
  EXPECT_EQ(tier->used_bytes(), 2 * extent_);
}

}  // namespace
}  // namespace mnemo

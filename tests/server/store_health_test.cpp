// check_store_file() and quick_check() (server/store_health.h) on real SQLite stores in WAL mode,
// copied while their connection is still open (what kill -9 leaves: the database file as of the
// last checkpoint and the WAL with every acknowledged transaction since). Each finding is checked
// against what SQLite itself then does with the copy: the rows it still sees.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "server/store_health.h"

namespace mnemo::server {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

constexpr int kRows = 12;
constexpr size_t kWalHeaderBytes = 32;
constexpr size_t kFrameHeaderBytes = 24;

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/mnemo-store-health-XXXXXX";
    const char* made = ::mkdtemp(tmpl);
    if (made == nullptr) std::abort();
    path = made;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

std::vector<uint8_t> slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void spit(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

uint32_t load_be(const std::vector<uint8_t>& b, size_t at) {
  return (uint32_t{b[at]} << 24) | (uint32_t{b[at + 1]} << 16) | (uint32_t{b[at + 2]} << 8) | uint32_t{b[at + 3]};
}

void exec(sqlite3* db, const std::string& sql) {
  char* message = nullptr;
  const int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &message);
  EXPECT_EQ(rc, SQLITE_OK) << sql << ": " << (message != nullptr ? message : "");
  sqlite3_free(message);
}

// The WAL's frames as the test reads them: page size from the header, commit flags per frame.
struct WalLayout {
  uint32_t page_size = 0;
  size_t frame_bytes = 0;
  std::vector<bool> commit;
  size_t offset(size_t frame) const { return kWalHeaderBytes + frame * frame_bytes; }
  // Frames SQLite replays when it stops before frame `bad`: up to the last commit before it.
  size_t replayed_before(size_t bad) const {
    while (bad > 0 && !commit[bad - 1]) --bad;
    return bad;
  }
  size_t commits_from(size_t frame) const {
    return static_cast<size_t>(std::count(commit.begin() + static_cast<std::ptrdiff_t>(frame), commit.end(), true));
  }
};

WalLayout layout_of(const std::vector<uint8_t>& wal) {
  WalLayout l;
  l.page_size = load_be(wal, 8);
  l.frame_bytes = kFrameHeaderBytes + l.page_size;
  for (size_t i = 0; l.offset(i + 1) <= wal.size(); ++i) l.commit.push_back(load_be(wal, l.offset(i) + 4) != 0);
  return l;
}

class StoreHealthTest : public ::testing::Test {
 protected:
  TempDir dir_;
  std::string live_ = dir_.path + "/live.db";
  std::string db_ = dir_.path + "/crashed.db";
  std::string wal_ = db_ + "-wal";

  // A store like ResponseStore's (WAL, synchronous=FULL) with kRows rows, one transaction each,
  // never checkpointed; copied to db_ while its connection is open, then closed (which
  // checkpoints the live one, not the copy).
  void make_crashed_store(int rows = kRows, const std::string& body = "turn") {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(live_.c_str(), &db), SQLITE_OK);
    exec(db, "PRAGMA journal_mode=WAL");
    exec(db, "PRAGMA synchronous=FULL");
    exec(db, "PRAGMA wal_autocheckpoint=0");
    exec(db, "CREATE TABLE responses (id TEXT PRIMARY KEY, body TEXT NOT NULL)");
    for (int i = 0; i < rows; ++i) {
      exec(db, "INSERT INTO responses VALUES ('resp_" + std::to_string(i) + "', '" + body + "')");
    }
    copy_live();
    sqlite3_close(db);
  }

  void copy_live() {
    fs::copy_file(live_, db_, fs::copy_options::overwrite_existing);
    fs::copy_file(live_ + "-wal", wal_, fs::copy_options::overwrite_existing);
  }

  // What SQLite sees in the copy once it has run its recovery: the row count, or -1 when it
  // cannot read the table (the error in `error`).
  int rows_sqlite_sees(std::string* error = nullptr) const {
    sqlite3* db = nullptr;
    int rows = -1;
    if (sqlite3_open(db_.c_str(), &db) == SQLITE_OK) {
      sqlite3_stmt* stmt = nullptr;
      if (sqlite3_prepare_v2(db, "SELECT count(*) FROM responses", -1, &stmt, nullptr) == SQLITE_OK &&
          sqlite3_step(stmt) == SQLITE_ROW) {
        rows = sqlite3_column_int(stmt, 0);
      }
      sqlite3_finalize(stmt);
    }
    if (error != nullptr) *error = sqlite3_errmsg(db);
    sqlite3_close(db);
    return rows;
  }

  StoreHealth check() const {
    auto health = check_store_file(db_);
    EXPECT_TRUE(health.ok()) << health.error().message();
    return health.ok() ? *health : StoreHealth{};
  }
};

TEST_F(StoreHealthTest, AnIntactWalDropsNothing) {
  make_crashed_store();
  const auto wal = slurp(wal_);
  const WalLayout l = layout_of(wal);
  ASSERT_GE(l.commit.size(), static_cast<size_t>(kRows));
  ASSERT_TRUE(l.commit.back());
  EXPECT_EQ(wal.size(), l.offset(l.commit.size()));  // whole frames only

  const StoreHealth h = check();
  EXPECT_TRUE(h.ok()) << h.problem;
  EXPECT_TRUE(h.header_ok);
  EXPECT_TRUE(h.wal_present);
  EXPECT_TRUE(h.wal_header_ok);
  EXPECT_EQ(h.wal_frames_total, l.commit.size());
  EXPECT_EQ(h.wal_frames_valid, l.commit.size());
  EXPECT_EQ(h.wal_frames_replayed, l.commit.size());
  EXPECT_EQ(h.wal_frames_dropped, 0u);
  EXPECT_EQ(h.wal_torn_bytes, 0u);
  EXPECT_EQ(rows_sqlite_sees(), kRows);
}

TEST_F(StoreHealthTest, AFlippedByteInAMiddleFramesPageDropsTheFramesFromThere) {
  make_crashed_store();
  auto wal = slurp(wal_);
  const WalLayout l = layout_of(wal);
  const size_t n = l.commit.size();
  const size_t bad = n / 2;  // each INSERT writes the table's page and its key index's: a frame may start or end one
  const size_t replayed = l.replayed_before(bad);
  ASSERT_GT(l.commits_from(bad), 1u);
  wal[l.offset(bad) + kFrameHeaderBytes + l.page_size / 2] ^= 0x20;
  spit(wal_, wal);

  const StoreHealth h = check();
  EXPECT_FALSE(h.ok());
  EXPECT_TRUE(h.header_ok);
  EXPECT_TRUE(h.wal_header_ok);
  EXPECT_EQ(h.wal_frames_total, n);
  EXPECT_EQ(h.wal_frames_valid, bad);
  EXPECT_EQ(h.wal_frames_replayed, replayed);
  EXPECT_EQ(h.wal_frames_dropped, n - replayed);
  EXPECT_THAT(h.problem, HasSubstr(wal_));
  EXPECT_THAT(h.problem, HasSubstr("frame " + std::to_string(bad + 1) + " of " + std::to_string(n)));
  EXPECT_THAT(h.problem, HasSubstr("silently drop " + std::to_string(n - replayed) + " frames"));
  // SQLite indeed loses the damaged transaction and every one after it, without an error.
  EXPECT_EQ(rows_sqlite_sees(), kRows - static_cast<int>(l.commits_from(replayed)));
}

TEST_F(StoreHealthTest, ATornFinalFrameIsTheNormalCrashNotALoss) {
  make_crashed_store();
  auto wal = slurp(wal_);
  const WalLayout l = layout_of(wal);
  const size_t n = l.commit.size();
  const size_t torn = l.frame_bytes / 2;
  ASSERT_GT(wal.size(), torn);
  // The last transaction's write cut short (erase, not resize: GCC 12 at -O1 sees resize's growth
  // path as a memset of up to SIZE_MAX bytes and reports it).
  wal.erase(wal.end() - static_cast<std::ptrdiff_t>(torn), wal.end());
  spit(wal_, wal);

  const StoreHealth h = check();
  EXPECT_TRUE(h.ok()) << h.problem;
  EXPECT_EQ(h.wal_frames_total, n - 1);
  EXPECT_EQ(h.wal_frames_valid, n - 1);
  EXPECT_EQ(h.wal_frames_replayed, l.replayed_before(n - 1));  // the cut transaction's first frames are not
  EXPECT_EQ(h.wal_frames_dropped, 0u);
  EXPECT_EQ(h.wal_torn_bytes, l.frame_bytes - torn);
  EXPECT_EQ(rows_sqlite_sees(), kRows - 1);
}

TEST_F(StoreHealthTest, AWholeButDamagedLastFrameIsNotCountedEither) {
  // Its checksum fails like a write the crash interrupted after the file grew: nothing after it
  // proves it was acknowledged.
  make_crashed_store();
  auto wal = slurp(wal_);
  const WalLayout l = layout_of(wal);
  const size_t n = l.commit.size();
  wal[l.offset(n - 1) + kFrameHeaderBytes + 7] ^= 0x01;
  spit(wal_, wal);
  const StoreHealth h = check();
  EXPECT_TRUE(h.ok()) << h.problem;
  EXPECT_EQ(h.wal_frames_valid, n - 1);
  EXPECT_EQ(h.wal_frames_replayed, l.replayed_before(n - 1));
  EXPECT_EQ(h.wal_frames_dropped, 0u);
  EXPECT_EQ(rows_sqlite_sees(), kRows - 1);
}

TEST_F(StoreHealthTest, ADamagedWalHeaderDropsEveryFrame) {
  make_crashed_store();
  const auto intact = slurp(wal_);
  const size_t n = layout_of(intact).commit.size();
  const auto db = slurp(db_);
  struct Damage {
    size_t at;
    uint8_t bit;
    const char* found;
  };
  for (const Damage d : {Damage{13, 0x01, "header checksum mismatch"},  // the checkpoint sequence
                         Damage{3, 0x01, "header checksum mismatch"},   // the magic's word-order bit
                         Damage{1, 0x10, "magic 0x376f0682"},
                         Damage{10, 0x01, "page size"}}) {             // read with the database's instead
    SCOPED_TRACE("WAL header byte " + std::to_string(d.at));
    auto wal = intact;
    wal[d.at] ^= d.bit;
    spit(wal_, wal);
    spit(db_, db);
    const StoreHealth h = check();
    EXPECT_FALSE(h.wal_header_ok);
    EXPECT_EQ(h.wal_frames_total, n);
    EXPECT_EQ(h.wal_frames_valid, 0u);
    EXPECT_EQ(h.wal_frames_replayed, 0u);
    EXPECT_EQ(h.wal_frames_dropped, n);
    EXPECT_THAT(h.problem, HasSubstr(d.found));
    EXPECT_THAT(h.problem, HasSubstr("SQLite will ignore the whole WAL: " + std::to_string(n) + " frames"));
    std::string error;
    EXPECT_EQ(rows_sqlite_sees(&error), -1);  // the table was created in the WAL too
    EXPECT_THAT(error, HasSubstr("no such table"));
  }
}

TEST_F(StoreHealthTest, StaleFramesOfAnEarlierGenerationAreNotALoss) {
  // After a checkpoint the next writer starts the WAL over with new salts; the old frames stay
  // behind the new ones, and recovery stops at them by design.
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(live_.c_str(), &db), SQLITE_OK);
  exec(db, "PRAGMA journal_mode=WAL");
  exec(db, "PRAGMA wal_autocheckpoint=0");
  exec(db, "CREATE TABLE responses (id TEXT PRIMARY KEY, body TEXT NOT NULL)");
  for (int i = 0; i < kRows; ++i) exec(db, "INSERT INTO responses VALUES ('a" + std::to_string(i) + "', 'turn')");
  exec(db, "PRAGMA wal_checkpoint(RESTART)");
  for (int i = 0; i < 2; ++i) exec(db, "INSERT INTO responses VALUES ('b" + std::to_string(i) + "', 'turn')");
  copy_live();
  sqlite3_close(db);

  // The new generation: the frames carrying the header's salts, all at the front.
  const auto wal = slurp(wal_);
  const WalLayout l = layout_of(wal);
  const auto salts_of_frame = [&](size_t i) { return wal.begin() + static_cast<std::ptrdiff_t>(l.offset(i) + 8); };
  size_t current = 0;
  while (current < l.commit.size() && std::equal(wal.begin() + 16, wal.begin() + 24, salts_of_frame(current))) ++current;
  ASSERT_GT(current, 0u);
  ASSERT_LT(current, l.commit.size());
  ASSERT_TRUE(l.commit[current - 1]);

  const StoreHealth h = check();
  EXPECT_TRUE(h.ok()) << h.problem;
  EXPECT_EQ(h.wal_frames_total, l.commit.size());
  EXPECT_EQ(h.wal_frames_valid, current);
  EXPECT_EQ(h.wal_frames_replayed, current);
  EXPECT_EQ(h.wal_frames_dropped, 0u);
  EXPECT_EQ(rows_sqlite_sees(), kRows + 2);
}

TEST_F(StoreHealthTest, ADamagedDatabaseHeaderIsReported) {
  make_crashed_store();
  fs::remove(wal_);  // as after a clean close: the file's header is the one SQLite reads
  {
    // Without its WAL the copy holds only a header; give it a table, closed cleanly.
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(db_.c_str(), &db), SQLITE_OK);
    exec(db, "CREATE TABLE IF NOT EXISTS responses (id TEXT PRIMARY KEY, body TEXT NOT NULL)");
    sqlite3_close(db);
  }
  ASSERT_FALSE(fs::exists(wal_));
  EXPECT_TRUE(check().ok());

  auto bytes = slurp(db_);
  bytes[3] ^= 0x40;  // "SQLite format 3" no more
  spit(db_, bytes);
  StoreHealth h = check();
  EXPECT_FALSE(h.header_ok);
  EXPECT_FALSE(h.wal_present);
  EXPECT_THAT(h.problem, HasSubstr(db_ + ": damaged database header: not a SQLite database header"));
  std::string error;
  EXPECT_EQ(rows_sqlite_sees(&error), -1);
  EXPECT_THAT(error, HasSubstr("not a database"));

  bytes[3] ^= 0x40;
  bytes[16] = 0x03;  // page size 0x0300 + the old low byte: not a power of two
  spit(db_, bytes);
  h = check();
  EXPECT_FALSE(h.header_ok);
  EXPECT_THAT(h.problem, HasSubstr("page size"));
  EXPECT_EQ(rows_sqlite_sees(), -1);
}

TEST_F(StoreHealthTest, AHeaderTheWalRewritesIsReportedButOpens) {
  // CREATE TABLE commits page 1 to the WAL: SQLite reads the header from there.
  make_crashed_store();
  auto bytes = slurp(db_);
  bytes[0] ^= 0x01;
  spit(db_, bytes);
  const StoreHealth h = check();
  EXPECT_TRUE(h.header_ok);
  EXPECT_FALSE(h.ok());
  EXPECT_THAT(h.problem, HasSubstr("a checkpoint will rewrite it"));
  EXPECT_EQ(rows_sqlite_sees(), kRows);
}

TEST_F(StoreHealthTest, AnEmptyDatabaseFileLosesItsWal) {
  make_crashed_store();
  const size_t n = layout_of(slurp(wal_)).commit.size();
  spit(db_, {});
  const StoreHealth h = check();
  EXPECT_EQ(h.wal_frames_replayed, n);
  EXPECT_EQ(h.wal_frames_dropped, n);
  EXPECT_THAT(h.problem, HasSubstr("missing or empty"));
  EXPECT_EQ(rows_sqlite_sees(), -1);  // SQLite deleted the WAL: no table
  EXPECT_FALSE(fs::exists(wal_));
}

TEST_F(StoreHealthTest, NoFilesIsANewStore) {
  const StoreHealth h = check();
  EXPECT_TRUE(h.ok()) << h.problem;
  EXPECT_TRUE(h.header_ok);
  EXPECT_FALSE(h.wal_present);
  EXPECT_EQ(h.wal_frames_total, 0u);
}

TEST_F(StoreHealthTest, AFileThatCannotBeReadIsAnError) {
  fs::create_directory(db_);  // opens, has a size, but read() fails (EISDIR)
  if (fs::status(db_).type() != fs::file_type::directory || ::access(db_.c_str(), R_OK) != 0) GTEST_SKIP();
  struct stat st {};
  ASSERT_EQ(::stat(db_.c_str(), &st), 0);
  if (st.st_size < 100) GTEST_SKIP() << "this file system gives directories no size";
  const auto health = check_store_file(db_);
  ASSERT_FALSE(health.ok());
  EXPECT_THAT(health.error().message(), HasSubstr(db_));
}

TEST_F(StoreHealthTest, QuickCheckSaysOkOnAnIntactStore) {
  make_crashed_store();
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(db_.c_str(), &db), SQLITE_OK);
  const auto result = quick_check(db);
  ASSERT_TRUE(result.ok()) << result.error().message();
  EXPECT_EQ(*result, "ok");
  sqlite3_close(db);
}

TEST_F(StoreHealthTest, QuickCheckReportsADamagedTable) {
  make_crashed_store(200, std::string(300, 'x'));  // a table of many pages
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(db_.c_str(), &db), SQLITE_OK);
  exec(db, "PRAGMA wal_checkpoint(TRUNCATE)");
  sqlite3_close(db);
  auto bytes = slurp(db_);
  const uint32_t page_size = (uint32_t{bytes[16]} << 8) | bytes[17];
  ASSERT_GE(bytes.size(), 4u * page_size);
  // Page 3 onward hold the table's and its index's b-tree pages: scramble one's cell pointers.
  for (size_t i = 8; i < 64; ++i) bytes[2 * page_size + i] = 0xff;
  spit(db_, bytes);

  ASSERT_EQ(sqlite3_open(db_.c_str(), &db), SQLITE_OK);
  const auto result = quick_check(db);
  ASSERT_TRUE(result.ok()) << result.error().message();
  EXPECT_THAT(*result, HasSubstr("page 3"));  // "On tree page 3 cell ...: ..."
  EXPECT_FALSE(result->empty());
  sqlite3_close(db);

  EXPECT_FALSE(quick_check(nullptr).ok());
}

}  // namespace
}  // namespace mnemo::server

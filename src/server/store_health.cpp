#include "server/store_health.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <optional>
#include <utility>
#include <vector>

#include <sqlite3.h>

namespace mnemo::server {
namespace {

constexpr uint32_t kWalMagic = 0x377f0682;  // | 1: big-endian checksum words
constexpr uint32_t kWalVersion = 3007000;
constexpr size_t kWalHeaderBytes = 32;
constexpr size_t kFrameHeaderBytes = 24;
constexpr size_t kDbHeaderBytes = 100;
constexpr char kDbMagic[16] = "SQLite format 3";  // with its terminating '\0': 16 bytes

uint32_t load_be(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}
uint32_t load_le(const uint8_t* p) {
  return (uint32_t{p[3]} << 24) | (uint32_t{p[2]} << 16) | (uint32_t{p[1]} << 8) | uint32_t{p[0]};
}

// SQLite's "wal checksum": Fibonacci-weighted sums of 32-bit words, carried from one frame to
// the next. `n` is a multiple of 8 (headers' 24 and 8 bytes, pages of 512 and up).
struct Checksum {
  uint32_t s1 = 0;
  uint32_t s2 = 0;
  bool operator==(const Checksum&) const = default;
};

Checksum add_checksum(Checksum c, bool big_endian, const uint8_t* data, size_t n) {
  for (size_t i = 0; i + 8 <= n; i += 8) {
    const uint32_t a = big_endian ? load_be(data + i) : load_le(data + i);
    const uint32_t b = big_endian ? load_be(data + i + 4) : load_le(data + i + 4);
    c.s1 += a + c.s2;
    c.s2 += b + c.s1;
  }
  return c;
}

Checksum stored_checksum(const uint8_t* p) { return {load_be(p), load_be(p + 4)}; }

bool sane_page_size(uint32_t size) { return size >= 512 && size <= 65536 && (size & (size - 1)) == 0; }

// A file opened for reading, closed on scope exit.
class InputFile {
 public:
  // nullopt when the file does not exist.
  static Result<std::optional<InputFile>> open(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      if (errno == ENOENT) return std::optional<InputFile>();
      return make_error("{}: cannot open: {}", path, std::strerror(errno));
    }
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      const int err = errno;
      ::close(fd);
      return make_error("{}: cannot stat: {}", path, std::strerror(err));
    }
    return std::optional<InputFile>(InputFile(fd, path, static_cast<uint64_t>(st.st_size)));
  }
  InputFile(InputFile&& other) noexcept
      : fd_(std::exchange(other.fd_, -1)), path_(std::move(other.path_)), size_(other.size_) {}
  InputFile& operator=(InputFile&&) = delete;
  ~InputFile() {
    if (fd_ >= 0) ::close(fd_);
  }

  uint64_t size() const { return size_; }

  Status read(uint8_t* out, size_t n, uint64_t offset) const {
    while (n > 0) {
      const ssize_t r = ::pread(fd_, out, n, static_cast<off_t>(offset));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) return make_error("{}: read at {}: {}", path_, offset, std::strerror(errno));
      if (r == 0) return make_error("{}: read at {}: unexpected end of file", path_, offset);
      out += r;
      n -= static_cast<size_t>(r);
      offset += static_cast<uint64_t>(r);
    }
    return ok_status();
  }

 private:
  InputFile(int fd, std::string path, uint64_t size) : fd_(fd), path_(std::move(path)), size_(size) {}
  int fd_;
  std::string path_;
  uint64_t size_;
};

// What is wrong with a database header (the first 100 bytes of page 1); empty when nothing is.
std::string header_defect(const uint8_t* h) {
  if (std::memcmp(h, kDbMagic, sizeof(kDbMagic)) != 0) return "not a SQLite database header";
  const uint32_t raw = (uint32_t{h[16]} << 8) | h[17];
  const uint32_t page_size = raw == 1 ? 65536 : raw;
  if (!sane_page_size(page_size)) return fmt::format("page size {} is not a power of two from 512 to 65536", raw);
  if (h[19] < 1 || h[19] > 2) return fmt::format("read format version {} (SQLite knows 1 and 2)", h[19]);
  if (h[21] != 64 || h[22] != 32 || h[23] != 32) return "payload fractions are not 64/32/32";
  return {};
}

uint32_t header_page_size(const uint8_t* h) {
  const uint32_t raw = (uint32_t{h[16]} << 8) | h[17];
  return raw == 1 ? 65536 : raw;
}

// The WAL as recovery reads it.
struct WalWalk {
  bool header_ok = false;
  std::string header_defect;
  uint64_t total = 0;
  uint64_t valid = 0;
  uint64_t replayed = 0;
  uint64_t dropped = 0;
  uint64_t torn_bytes = 0;
  std::optional<uint64_t> page1_offset;  // of the last replayed copy of page 1
  uint64_t first_bad = 0;                // the first frame recovery refused, from 0 (header damaged: 0)
};

// One frame at a time, through one buffer.
class FrameReader {
 public:
  FrameReader(const InputFile& wal, uint32_t page_size, bool big_endian)
      : wal_(wal), page_size_(page_size), big_endian_(big_endian), frame_(kFrameHeaderBytes + page_size) {}

  uint64_t frame_bytes() const { return frame_.size(); }
  uint64_t offset(uint64_t i) const { return kWalHeaderBytes + i * frame_bytes(); }
  Status read(uint64_t i) { return wal_.read(frame_.data(), frame_.size(), offset(i)); }

  uint32_t page() const { return load_be(frame_.data()); }
  bool commit() const { return load_be(frame_.data() + 4) != 0; }  // the database size after it
  const uint8_t* salts() const { return frame_.data() + 8; }
  Checksum stored() const { return stored_checksum(frame_.data() + 16); }
  // The frame's cumulative checksum as recovery computes it, from the previous one.
  Checksum checksum_from(Checksum seed, bool big_endian) const {
    return add_checksum(add_checksum(seed, big_endian, frame_.data(), 8), big_endian, frame_.data() + kFrameHeaderBytes,
                        page_size_);
  }
  Checksum checksum_from(Checksum seed) const { return checksum_from(seed, big_endian_); }

 private:
  const InputFile& wal_;
  uint32_t page_size_;
  bool big_endian_;
  std::vector<uint8_t> frame_;
};

// What the frames are read with.
struct WalHeader {
  uint32_t page_size = 0;  // 0: unknown, no frame can be read
  bool big_endian = false;
  Checksum seed;
  std::array<uint8_t, 8> salts{};
};

// Fills the header fields of `w`. A damaged header must not stop the count of what it loses:
// frames are then read with the database's page size (if the WAL's is no page size), the word
// order that makes the first frame's checksum come out, and the first frame's salts (the first
// frame is always written after the header's last reset).
Result<WalHeader> read_wal_header(const InputFile& wal, uint32_t db_page_size, WalWalk& w) {
  WalHeader h;
  std::array<uint8_t, kWalHeaderBytes> head{};
  MNEMO_RETURN_IF_ERROR(wal.read(head.data(), head.size(), 0));
  const uint32_t magic = load_be(head.data());
  const uint32_t version = load_be(head.data() + 4);
  const uint32_t page_size = load_be(head.data() + 8);
  const bool magic_ok = (magic & ~1u) == kWalMagic;
  h.big_endian = (magic & 1) != 0;
  h.seed = stored_checksum(head.data() + 24);
  std::memcpy(h.salts.data(), head.data() + 16, 8);
  if (!magic_ok) {
    w.header_defect = fmt::format("magic {:#010x}", magic);
  } else if (version != kWalVersion) {
    w.header_defect = fmt::format("format version {} (SQLite refuses to open the store)", version);
  } else if (!sane_page_size(page_size)) {
    w.header_defect = fmt::format("page size {}", page_size);
  } else if (add_checksum({}, h.big_endian, head.data(), 24) != h.seed) {
    w.header_defect = "header checksum mismatch";
  }
  w.header_ok = w.header_defect.empty();
  h.page_size = sane_page_size(page_size) ? page_size : sane_page_size(db_page_size) ? db_page_size : 0;
  if (w.header_ok || h.page_size == 0 || wal.size() < kWalHeaderBytes + kFrameHeaderBytes + h.page_size) return h;
  FrameReader first(wal, h.page_size, h.big_endian);
  MNEMO_RETURN_IF_ERROR(first.read(0));
  std::memcpy(h.salts.data(), first.salts(), 8);
  if (first.checksum_from(h.seed, true) == first.stored()) {
    h.big_endian = true;
  } else if (first.checksum_from(h.seed, false) == first.stored()) {
    h.big_endian = false;
  }
  return h;
}

Result<WalWalk> walk_wal(const InputFile& wal, uint32_t db_page_size) {
  WalWalk w;
  if (wal.size() < kWalHeaderBytes) {
    // SQLite writes the header with the first frame: no committed transaction is here.
    w.header_ok = wal.size() == 0;
    w.header_defect = "shorter than its header";
    w.torn_bytes = wal.size();
    return w;
  }
  MNEMO_ASSIGN_OR_RETURN(const WalHeader h, read_wal_header(wal, db_page_size, w));
  if (h.page_size == 0) return w;
  FrameReader frame(wal, h.page_size, h.big_endian);
  w.total = (wal.size() - kWalHeaderBytes) / frame.frame_bytes();
  w.torn_bytes = (wal.size() - kWalHeaderBytes) % frame.frame_bytes();

  bool in_prefix = w.header_ok;  // recovery accepts nothing after a bad header
  Checksum running = h.seed;
  Checksum previous_stored = h.seed;
  std::optional<uint64_t> last_commit;  // in the valid prefix
  std::optional<uint64_t> page1;
  std::optional<uint64_t> last_whole_commit_after;  // after the valid prefix
  for (uint64_t i = 0; i < w.total; ++i) {
    MNEMO_RETURN_IF_ERROR(frame.read(i));
    const bool ours = std::memcmp(frame.salts(), h.salts.data(), 8) == 0 && frame.page() != 0;
    const Checksum stored = frame.stored();
    if (in_prefix) {
      running = frame.checksum_from(running);
      if (ours && running == stored) {
        ++w.valid;
        if (frame.page() == 1) page1 = frame.offset(i) + kFrameHeaderBytes;
        if (frame.commit()) {
          last_commit = i;
          w.page1_offset = page1;
        }
        previous_stored = stored;
        continue;
      }
      in_prefix = false;
      w.first_bad = i;
    }
    // Past where recovery stops: a commit frame of this generation written whole (its checksum
    // follows from the one stored before it) ended a transaction that was acknowledged.
    if (ours && frame.commit() && frame.checksum_from(previous_stored) == stored) last_whole_commit_after = i;
    previous_stored = stored;
  }
  w.replayed = last_commit ? *last_commit + 1 : 0;
  if (last_whole_commit_after) w.dropped = *last_whole_commit_after + 1 - w.replayed;
  return w;
}

std::string describe_wal_loss(const std::string& wal_path, const WalWalk& w) {
  if (!w.header_ok) {
    return fmt::format("{}: damaged header ({}): SQLite will ignore the whole WAL: {} frames, {} of them in committed "
                       "transactions",
                       wal_path, w.header_defect, w.total, w.dropped);
  }
  return fmt::format("{}: frame {} of {} fails its salt or checksum: SQLite will replay {} frames and silently drop "
                     "{} frames of committed transactions after them",
                     wal_path, w.first_bad + 1, w.total, w.replayed, w.dropped);
}

void add_problem(std::string& problem, const std::string& text) {
  if (!problem.empty()) problem += "; ";
  problem += text;
}

}  // namespace

Result<StoreHealth> check_store_file(const std::string& db_path) {
  StoreHealth health;
  const std::string wal_path = db_path + "-wal";
  MNEMO_ASSIGN_OR_RETURN(auto db, InputFile::open(db_path));
  MNEMO_ASSIGN_OR_RETURN(auto wal, InputFile::open(wal_path));

  std::array<uint8_t, kDbHeaderBytes> db_header{};
  std::string db_defect;
  const bool db_empty = !db || db->size() == 0;
  if (!db_empty) {
    if (db->size() < kDbHeaderBytes) {
      db_defect = fmt::format("{} bytes, shorter than a database header", db->size());
    } else {
      MNEMO_RETURN_IF_ERROR(db->read(db_header.data(), db_header.size(), 0));
      db_defect = header_defect(db_header.data());
    }
  }

  std::optional<WalWalk> walk;
  if (wal) {
    health.wal_present = true;
    MNEMO_ASSIGN_OR_RETURN(walk, walk_wal(*wal, db_defect.empty() && !db_empty ? header_page_size(db_header.data()) : 0));
    health.wal_header_ok = walk->header_ok;
    health.wal_frames_total = walk->total;
    health.wal_frames_valid = walk->valid;
    health.wal_frames_replayed = walk->replayed;
    health.wal_frames_dropped = walk->dropped;
    health.wal_torn_bytes = walk->torn_bytes;
    if (db_empty && walk->replayed > 0) {
      // SQLite takes a WAL beside an empty database for a stale one and deletes it.
      health.wal_frames_dropped += walk->replayed;
      add_problem(health.problem, fmt::format("{}: the database file is missing or empty: SQLite will delete the WAL "
                                              "and the {} committed frames it replays",
                                              db_path, walk->replayed));
    }
    // A damaged header loses every frame, committed or not (a header alone is no loss).
    if (walk->dropped > 0 || (!walk->header_ok && wal->size() > kWalHeaderBytes)) {
      add_problem(health.problem, describe_wal_loss(wal_path, *walk));
    }
  }

  // Page 1 comes from the WAL when it holds a committed copy.
  if (walk && walk->page1_offset && !db_empty) {
    std::array<uint8_t, kDbHeaderBytes> page1{};
    MNEMO_RETURN_IF_ERROR(wal->read(page1.data(), page1.size(), *walk->page1_offset));
    const std::string defect = header_defect(page1.data());
    health.header_ok = defect.empty();
    if (!defect.empty()) {
      add_problem(health.problem, fmt::format("{}: the committed copy of the database header: {}", wal_path, defect));
    } else if (!db_defect.empty()) {
      add_problem(health.problem, fmt::format("{}: damaged database header ({}); the WAL's committed copy is whole and "
                                              "a checkpoint will rewrite it",
                                              db_path, db_defect));
    }
  } else if (!db_defect.empty()) {
    health.header_ok = false;
    add_problem(health.problem, fmt::format("{}: damaged database header: {}", db_path, db_defect));
  }
  return health;
}

Result<std::string> quick_check(sqlite3* db) {
  if (db == nullptr) return make_error("quick_check: no database connection");
  sqlite3_stmt* stmt = nullptr;
  int rc = sqlite3_prepare_v2(db, "PRAGMA quick_check", -1, &stmt, nullptr);
  std::string report;
  int rows = 0;
  constexpr int kMaxRows = 10;  // the first problems say enough; a damaged store can list thousands
  while (rc == SQLITE_OK || rc == SQLITE_ROW) {
    rc = sqlite3_step(stmt);
    if (rc != SQLITE_ROW) break;
    if (rows++ == kMaxRows) {
      report += "; ...";
      break;
    }
    const auto* text = reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0));
    if (!report.empty()) report += "; ";
    report += text != nullptr ? text : "(null)";
  }
  const std::string message = sqlite3_errmsg(db);
  sqlite3_finalize(stmt);
  const int primary = rc & 0xff;
  if (primary == SQLITE_CORRUPT || primary == SQLITE_NOTADB) return message;  // the finding itself
  if (rc != SQLITE_DONE && rc != SQLITE_ROW) return make_error("quick_check: {}", message);
  return report;
}

}  // namespace mnemo::server

// Health checks for the Responses API store (response_store.h): a SQLite database in WAL mode.
//
// Why: SQLite recovers the WAL ("<db>-wal") silently when it opens the store. It replays frames
// up to the first one whose salt or checksum is wrong, and only up to the last commit frame
// before it; everything after is dropped without a word. A flipped byte in one frame therefore
// loses that transaction AND every later acknowledged one. A damaged database header, on the
// other hand, makes the open fail outright. check_store_file() reads both files as SQLite will,
// BEFORE SQLite opens them (the open rewrites the WAL and the evidence goes), so the caller can
// log the loss, keep a copy of the WAL, or move a store it cannot open aside.
//
// The WAL format (SQLite's "Database File Format", section 4): a 32-byte header (magic
// 0x377f0682 or 0x377f0683, format version 3007000, page size, checkpoint sequence, two salts,
// a checksum of its first 24 bytes) then frames of a 24-byte header (page number, database size
// in pages for a commit frame else 0, the two salts, a checksum) and one page. Checksums are
// cumulative: each covers its frame header's first 8 bytes and page, seeded with the previous
// frame's (the WAL header's for the first frame), over 32-bit words that are big-endian when the
// magic's low bit is 1, little-endian otherwise.
#pragma once

#include <cstdint>
#include <string>

#include "util/result.h"

struct sqlite3;

namespace mnemo::server {

struct StoreHealth {
  // The database header SQLite will read (its page 1: the WAL's last committed copy if it has
  // one, else the main file's) says "SQLite format 3", a page size SQLite accepts and the fixed
  // payload fractions. True for a missing or empty file (a new store). False: the open fails.
  bool header_ok = true;
  bool wal_present = false;
  // The WAL's header is one SQLite accepts (magic, version, page size, checksum); when it is not,
  // SQLite ignores every frame.
  bool wal_header_ok = true;
  uint64_t wal_frames_total = 0;      // whole frames in the WAL
  uint64_t wal_frames_valid = 0;      // frames before the first one with a wrong salt or checksum
  uint64_t wal_frames_replayed = 0;   // what SQLite applies: the valid frames up to the last commit frame
  // Committed data SQLite will drop silently: the frames after the replayed ones up to the last
  // frame that carries the current salts, ends a transaction (a commit frame) and whose checksum
  // is right given the one stored before it (so it was written whole). 0 when the WAL merely ends
  // in a transaction a crash cut short, or in stale frames of an earlier generation.
  uint64_t wal_frames_dropped = 0;
  uint64_t wal_torn_bytes = 0;        // a partial frame at the end: the normal trace of a crash mid-write
  std::string problem;                // empty when healthy; else what is wrong, for the log

  bool ok() const { return problem.empty(); }
};

// Reads `db_path` and `db_path`-wal (either may be missing) as SQLite's open will, without
// opening them through SQLite. A damaged store is reported in the result, not as an Error: an
// Error means a file could not be read at all.
Result<StoreHealth> check_store_file(const std::string& db_path);

// Runs PRAGMA quick_check on an open store: "ok", or the first problems it reports (joined by
// "; "; a store too damaged to check at all reports SQLite's error the same way). An Error means
// the check could not run (no connection, the store busy, out of memory).
Result<std::string> quick_check(sqlite3* db);

}  // namespace mnemo::server

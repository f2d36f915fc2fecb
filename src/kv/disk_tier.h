// The disk tier of the KV pool (SPEC M1, P2): one extent file per cached chunk in a directory
// with a size limit, written by a background thread so the engine never waits for the disk.
//
// An extent is a header (magic, version, the layout fingerprint, namespace, the chunk's key and
// its parent's key, its position and tokens, payload size, payload checksum, header checksum)
// followed by the chunk's KV block. The header alone is enough to rebuild the prefix index at
// start-up; the payload is checked (XXH3) on every read, so a corrupted or truncated extent is
// detected and dropped, never served.
//
// Durability: an extent is written to "<key>.tmp", fdatasync'ed, renamed to "<key>.kv", and the
// directory fsync'ed before the write is reported complete; only then does the index count the
// chunk as on disk. A crash at any point leaves either no extent or a whole one (temporaries are
// deleted at start-up).
//
// Start-up: scan() deletes only what is damaged (and temporaries), counts what it dropped by
// reason and logs one summary line to stderr. An intact extent whose parent's extent is missing or
// damaged is ORPHANED: the prefix index is a trie of token chunks, and without the parent's tokens
// nothing can reach the child, so scan() does not list it; but it stays on disk (a later run that
// finds its parent rewritten lists it again), outside used_bytes(), and is the first thing deleted
// when a write needs the room.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "util/result.h"

namespace mnemo {

struct ExtentHeader {
  uint64_t ns = 0;
  uint64_t key = 0;
  uint64_t parent_key = 0;  // 0: the chunk starts a sequence
  int32_t position = 0;
  std::vector<int32_t> tokens;
  bool compact = false;  // the payload holds the global layers only (set by scan from its size)
  uint64_t payload_hash = 0;  // XXH3 of the payload, as the header records it
};

class DiskTier {
 public:
  // What the last scan() found. scanned = kept + foreign + dropped_* + orphaned.
  struct ScanStats {
    int64_t scanned = 0;            // files named *.kv (temporaries not included)
    int64_t kept = 0;               // listed for the index
    int64_t foreign = 0;            // another model's or KV layout's: left alone, not listed
    int64_t dropped_corrupt = 0;    // header checksum mismatch: deleted
    int64_t dropped_malformed = 0;  // truncated, not an extent, bad token count or size, misnamed, unreadable: deleted
    int64_t orphaned = 0;           // intact, an ancestor's extent missing or damaged: kept on disk, not listed
    int64_t temporaries = 0;        // writes a crash interrupted: deleted
  };
  struct Stats {
    ScanStats last_scan;
    int64_t orphans = 0;            // orphaned extents still on disk
    int64_t orphan_bytes = 0;       // their bytes: on disk, but not in used_bytes()
    int64_t orphans_reclaimed = 0;  // orphans deleted since the scan to make room for writes
  };

  // Opens (creating it if needed) `dir` for extents of `payload_bytes` each whose layout has the
  // given fingerprint; extents of another fingerprint in the directory are left alone.
  // Extents of `compact_payload_bytes` (if not 0) hold a sliding-window model's global layers.
  static Result<std::unique_ptr<DiskTier>> open(const std::string& dir, uint64_t fingerprint, size_t payload_bytes,
                                                int64_t capacity_bytes, size_t compact_payload_bytes = 0);
  ~DiskTier();  // finishes the queued writes
  DiskTier(const DiskTier&) = delete;
  DiskTier& operator=(const DiskTier&) = delete;

  // The headers of the intact extents in the directory whose ancestors' extents are intact too,
  // parents before children. Extents whose header is damaged, whose size is wrong, and leftover
  // temporaries are deleted; orphans stay on disk unlisted (see the top of this file). Waits for
  // queued writes first, so that the directory it reads is the tier's. Logs a summary line.
  std::vector<ExtentHeader> scan();

  // Queues the write of one extent (the payload is copied). False, and nothing queued, when the
  // queue already holds its bound of bytes or the extent would not fit the capacity.
  bool write(const ExtentHeader& header, std::span<const uint8_t> payload);
  // Turns the bytes given to write() into the extent's payload, on the writer thread.
  using PayloadEncoder = std::function<void(std::span<const uint8_t> source, std::span<uint8_t> payload)>;
  // The same, for a payload of `payload_bytes` that `encode` makes from `source` (copied) on the
  // writer thread, as are the checksums: a conversion to the disk's element type costs the
  // caller (the engine thread) a copy of the source, not the conversion.
  bool write(const ExtentHeader& header, std::span<const uint8_t> source, size_t payload_bytes, PayloadEncoder encode);
  // Writes finished since the last call: the key and whether it is durable.
  std::vector<std::pair<uint64_t, bool>> take_completed();
  // Reads a durable extent's payload (full or compact: `out` has its size), checking its
  // checksums. An Error says what is wrong.
  Status read(uint64_t key, std::span<uint8_t> out) const;
  // Deletes an extent (after any queued write of it).
  void remove(uint64_t key);
  // Blocks until every queued write and removal is done (tests, shutdown).
  void flush();
  // From now on each write() returns once the extent is durable and its completion is ready for
  // take_completed(): for simulations, whose replays must not depend on when the writer thread runs.
  void wait_for_each_write() { each_write_waits_ = true; }

  size_t extent_bytes(size_t n_tokens, bool compact = false) const;  // header and payload of one extent
  static size_t header_bytes(size_t n_tokens);  // an extent's header for a chunk of `n_tokens`
  size_t payload_bytes() const { return payload_bytes_; }
  size_t compact_payload_bytes() const { return compact_payload_bytes_; }
  int64_t capacity_bytes() const { return capacity_bytes_; }
  int64_t used_bytes() const;  // extents on disk or queued (orphans not included)
  Stats stats() const;
  size_t queued() const;
  const std::string& dir() const { return dir_; }
  std::string path_of(uint64_t key) const;

  static constexpr size_t kMaxQueuedBytes = size_t{256} << 20;
  // Buffers kept for the next writes (an extent's source or encoded payload each), in bytes: a
  // burst of write-throughs (a long prompt's chunks) finds its buffers' pages already touched.
  static constexpr size_t kSpareBytes = size_t{32} << 20;

 private:
  DiskTier(std::string dir, uint64_t fingerprint, size_t payload_bytes, int64_t capacity_bytes,
           size_t compact_payload_bytes);
  bool valid_payload_size(size_t n) const { return n == payload_bytes_ || (compact_payload_bytes_ != 0 && n == compact_payload_bytes_); }
  // A queued write (or, with `remove`, a deletion). The extent is assembled on the writer thread:
  // the caller copies the source into a buffer of spare_ and queues it.
  struct Job {
    uint64_t key = 0;
    bool remove = false;
    ExtentHeader header;
    std::vector<uint8_t> source;  // the payload itself, or what `encode` makes it from
    size_t payload_bytes = 0;
    PayloadEncoder encode;
    size_t queued_bytes() const { return source.size() + (encode ? payload_bytes : 0); }
    static Job removal(uint64_t key) {
      Job job;
      job.key = key;
      job.remove = true;
      return job;
    }
  };
  // A buffer whose pages were touched before, if one is spare: a fresh one of an extent's size is
  // a fresh mapping, and faulting its pages in costs the caller more than the copy into it.
  std::vector<uint8_t> take_spare_buffer();
  void give_back_buffer(std::vector<uint8_t> buffer);
  void keep_spare_locked(std::vector<uint8_t> buffer);
  // Writes the job's extent (its header, checksums and payload, encoded here if need be).
  bool write_job(Job& job, std::vector<uint8_t>& encoded) const;
  // Why read_header() refused an extent: scan() deletes the first two, counted apart.
  enum class Defect : uint8_t { kMalformed, kCorrupt, kForeign };
  struct Orphan {
    int64_t bytes = 0;
    int32_t position = 0;
  };
  struct Found {  // an intact extent scan() read
    ExtentHeader header;
    int64_t bytes = 0;
  };
  void run();
  // The validated header of the open extent `fd` (named `path` in errors) of `file_size` bytes;
  // on an error, `defect` (if given) says which kind.
  Result<ExtentHeader> read_header(int fd, const std::string& path, size_t file_size, Defect* defect = nullptr) const;
  Result<ExtentHeader> read_header(const std::string& path, size_t file_size, Defect* defect = nullptr) const;
  // Queues the deletion of orphans, deepest in their sequence first (worth least without what
  // comes before), until `bytes` more fit the capacity beside them or none is left.
  void reclaim_orphans_locked(int64_t bytes);
  void forget_orphan_locked(uint64_t key);
  // Registers scan()'s intact extents: those reachable from a sequence's start as extents (the
  // headers returned, by position), the rest as orphans; counts both into `stats`.
  std::vector<ExtentHeader> classify_locked(std::vector<Found>& intact, ScanStats& stats);

  const std::string dir_;
  const uint64_t fingerprint_;
  const size_t payload_bytes_;
  const int64_t capacity_bytes_;
  const size_t compact_payload_bytes_;

  mutable std::mutex mutex_;
  std::condition_variable work_ready_;
  std::condition_variable idle_;
  std::deque<Job> queue_;              // guarded by mutex_
  size_t queued_bytes_ = 0;            // guarded by mutex_
  bool busy_ = false;                  // guarded by mutex_
  bool stopping_ = false;              // guarded by mutex_
  bool each_write_waits_ = false;      // set before use, on the writing thread
  std::vector<std::pair<uint64_t, bool>> completed_;  // guarded by mutex_
  std::unordered_map<uint64_t, int64_t> extents_;     // key -> bytes, on disk or queued; guarded by mutex_
  int64_t used_bytes_ = 0;             // guarded by mutex_
  std::unordered_map<uint64_t, Orphan> orphans_;           // on disk, unlisted; guarded by mutex_
  std::set<std::pair<int32_t, uint64_t>> orphans_by_depth_;  // (position, key) of orphans_; guarded by mutex_
  int64_t orphan_bytes_ = 0;           // guarded by mutex_
  int64_t orphans_reclaimed_ = 0;      // guarded by mutex_
  ScanStats last_scan_;                // guarded by mutex_
  std::vector<std::vector<uint8_t>> spare_;  // guarded by mutex_
  size_t spare_bytes_ = 0;                   // their capacities; guarded by mutex_
  std::thread thread_;
};

// The start-up log line of a scan of `dir`: how many extents were scanned, kept, dropped by
// reason and orphaned.
std::string describe_scan(const std::string& dir, const DiskTier::ScanStats& stats);

// A fingerprint of what makes extents interchangeable: the model file's identity and the KV
// layout. Extents written for another model or layout never match.
uint64_t kv_fingerprint(std::string_view model_identity, int32_t n_layers, int32_t n_kv_heads, int32_t head_dim_k,
                        int32_t head_dim_v, int32_t block_size, int32_t dtype);

}  // namespace mnemo

#include "kv/disk_tier.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <system_error>

#include <fmt/format.h>
#include <xxhash.h>

#include "util/thread_name.h"

namespace mnemo {
namespace {

constexpr char kMagic[8] = {'M', 'N', 'E', 'M', 'O', 'K', 'V', '1'};
constexpr const char* kExtentSuffix = ".kv";
constexpr const char* kTempSuffix = ".tmp";
constexpr size_t kMaxTokens = 1 << 16;

// Fixed part of a header; then n_tokens int32 tokens; then the trailer.
struct HeaderPrefix {
  char magic[8];
  uint64_t fingerprint;
  uint64_t ns;
  uint64_t key;
  uint64_t parent_key;
  int32_t position;
  int32_t n_tokens;
};
struct HeaderTrailer {
  uint64_t payload_bytes;
  uint64_t payload_hash;
  uint64_t header_hash;  // of everything before it
};

// memcpy that allows an empty (possibly null) range: memcpy(dst, nullptr, 0) is undefined.
void copy_bytes(void* dst, const void* src, size_t n) {
  if (n != 0) std::memcpy(dst, src, n);
}

bool write_all(int fd, const uint8_t* data, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, data, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    data += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool read_all(int fd, uint8_t* data, size_t n, off_t offset) {
  while (n > 0) {
    const ssize_t r = ::pread(fd, data, n, offset);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    data += r;
    n -= static_cast<size_t>(r);
    offset += r;
  }
  return true;
}

void fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

uint64_t kv_fingerprint(std::string_view model_identity, int32_t n_layers, int32_t n_kv_heads, int32_t head_dim_k,
                        int32_t head_dim_v, int32_t block_size, int32_t dtype) {
  const int32_t dims[] = {n_layers, n_kv_heads, head_dim_k, head_dim_v, block_size, dtype};
  const uint64_t seed = XXH3_64bits(model_identity.data(), model_identity.size());
  return XXH3_64bits_withSeed(dims, sizeof(dims), seed);
}

DiskTier::DiskTier(std::string dir, uint64_t fingerprint, size_t payload_bytes, int64_t capacity_bytes,
                   size_t compact_payload_bytes)
    : dir_(std::move(dir)),
      fingerprint_(fingerprint),
      payload_bytes_(payload_bytes),
      capacity_bytes_(capacity_bytes),
      compact_payload_bytes_(compact_payload_bytes) {
  thread_ = std::thread([this] { run(); });
}

Result<std::unique_ptr<DiskTier>> DiskTier::open(const std::string& dir, uint64_t fingerprint, size_t payload_bytes,
                                                 int64_t capacity_bytes, size_t compact_payload_bytes) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return make_error(ErrorCode::kIoError, "KV disk tier {}: cannot create the directory: {}", dir, ec.message());
  const std::string probe = dir + "/.probe";
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return make_error(ErrorCode::kIoError, "KV disk tier {}: not writable: {}", dir, std::strerror(errno));
  ::close(fd);
  ::unlink(probe.c_str());
  if (capacity_bytes <= 0) return make_error("KV disk tier {}: capacity must be > 0 bytes", dir);
  return std::unique_ptr<DiskTier>(new DiskTier(dir, fingerprint, payload_bytes, capacity_bytes, compact_payload_bytes));
}

DiskTier::~DiskTier() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  work_ready_.notify_all();
  thread_.join();
}

std::string DiskTier::path_of(uint64_t key) const {
  char name[32];
  std::snprintf(name, sizeof(name), "%016llx", static_cast<unsigned long long>(key));
  return dir_ + "/" + name + kExtentSuffix;
}

size_t DiskTier::header_bytes(size_t n_tokens) {
  return sizeof(HeaderPrefix) + n_tokens * sizeof(int32_t) + sizeof(HeaderTrailer);
}

size_t DiskTier::extent_bytes(size_t n_tokens, bool compact) const {
  return header_bytes(n_tokens) + (compact ? compact_payload_bytes_ : payload_bytes_);
}

int64_t DiskTier::used_bytes() const {
  std::lock_guard lock(mutex_);
  return used_bytes_;
}

size_t DiskTier::queued() const {
  std::lock_guard lock(mutex_);
  return queue_.size() + (busy_ ? 1 : 0);
}

bool DiskTier::write(const ExtentHeader& header, std::span<const uint8_t> payload) {
  return write(header, payload, payload.size(), {});
}

bool DiskTier::write(const ExtentHeader& header, std::span<const uint8_t> source, size_t payload_bytes,
                     PayloadEncoder encode) {
  if (!valid_payload_size(payload_bytes) || header.tokens.size() > kMaxTokens) return false;
  if (!encode && source.size() != payload_bytes) return false;
  const auto size = static_cast<int64_t>(header_bytes(header.tokens.size()) + payload_bytes);
  Job job;
  job.key = header.key;
  job.header = header;
  job.source = take_spare_buffer();
  job.source.assign(source.begin(), source.end());
  job.payload_bytes = payload_bytes;
  job.encode = std::move(encode);
  {
    std::lock_guard lock(mutex_);
    // One extent per key; the queue's and the tier's bounds.
    if (queued_bytes_ + job.queued_bytes() > kMaxQueuedBytes || used_bytes_ + size > capacity_bytes_ ||
        extents_.count(header.key) != 0) {
      keep_spare_locked(std::move(job.source));
      return false;
    }
    if (orphans_.count(header.key) != 0) {
      // Its parent came back: the new extent takes over. Deleted first, so a failed write leaves
      // no file the tier does not track.
      forget_orphan_locked(header.key);
      queue_.push_back(Job::removal(header.key));
    }
    reclaim_orphans_locked(size);
    extents_[header.key] = size;
    used_bytes_ += size;
    queued_bytes_ += job.queued_bytes();
    queue_.push_back(std::move(job));
  }
  work_ready_.notify_one();
  if (each_write_waits_) flush();
  return true;
}

std::vector<uint8_t> DiskTier::take_spare_buffer() {
  std::lock_guard lock(mutex_);
  if (spare_.empty()) return {};
  std::vector<uint8_t> buffer = std::move(spare_.back());
  spare_.pop_back();
  spare_bytes_ -= buffer.capacity();
  return buffer;
}

void DiskTier::give_back_buffer(std::vector<uint8_t> buffer) {
  std::lock_guard lock(mutex_);
  keep_spare_locked(std::move(buffer));
}

void DiskTier::keep_spare_locked(std::vector<uint8_t> buffer) {
  if (buffer.capacity() == 0 || spare_bytes_ + buffer.capacity() > kSpareBytes) return;
  spare_bytes_ += buffer.capacity();
  spare_.push_back(std::move(buffer));
}

bool DiskTier::write_job(Job& job, std::vector<uint8_t>& encoded) const {
  std::span<const uint8_t> payload = job.source;
  if (job.encode) {
    encoded.resize(job.payload_bytes);
    job.encode(job.source, encoded);
    payload = encoded;
  }
  const ExtentHeader& h = job.header;
  std::vector<uint8_t> head(header_bytes(h.tokens.size()));
  HeaderPrefix prefix{};
  std::memcpy(prefix.magic, kMagic, sizeof(kMagic));
  prefix.fingerprint = fingerprint_;
  prefix.ns = h.ns;
  prefix.key = h.key;
  prefix.parent_key = h.parent_key;
  prefix.position = h.position;
  prefix.n_tokens = static_cast<int32_t>(h.tokens.size());
  std::memcpy(head.data(), &prefix, sizeof(prefix));
  copy_bytes(head.data() + sizeof(prefix), h.tokens.data(), h.tokens.size() * sizeof(int32_t));
  HeaderTrailer trailer{};
  trailer.payload_bytes = payload.size();
  trailer.payload_hash = XXH3_64bits(payload.data(), payload.size());
  trailer.header_hash = XXH3_64bits(head.data(), head.size() - sizeof(trailer));
  std::memcpy(head.data() + head.size() - sizeof(trailer), &trailer, sizeof(trailer));

  const std::string path = path_of(job.key);
  const std::string tmp = path + kTempSuffix;
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  const bool ok = write_all(fd, head.data(), head.size()) && write_all(fd, payload.data(), payload.size()) && ::fdatasync(fd) == 0;
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    return false;
  }
  return true;
}

void DiskTier::remove(uint64_t key) {
  {
    std::lock_guard lock(mutex_);
    auto it = extents_.find(key);
    if (it != extents_.end()) {
      used_bytes_ -= it->second;
      extents_.erase(it);
    } else if (orphans_.count(key) != 0) {
      forget_orphan_locked(key);
    } else {
      return;
    }
    queue_.push_back(Job::removal(key));
  }
  work_ready_.notify_one();
}

DiskTier::Stats DiskTier::stats() const {
  std::lock_guard lock(mutex_);
  return Stats{last_scan_, static_cast<int64_t>(orphans_.size()), orphan_bytes_, orphans_reclaimed_};
}

void DiskTier::forget_orphan_locked(uint64_t key) {
  const auto it = orphans_.find(key);
  if (it == orphans_.end()) return;
  orphan_bytes_ -= it->second.bytes;
  orphans_by_depth_.erase({it->second.position, key});
  orphans_.erase(it);
}

void DiskTier::reclaim_orphans_locked(int64_t bytes) {
  while (!orphans_by_depth_.empty() && used_bytes_ + orphan_bytes_ + bytes > capacity_bytes_) {
    const uint64_t key = std::prev(orphans_by_depth_.end())->second;
    forget_orphan_locked(key);
    queue_.push_back(Job::removal(key));
    ++orphans_reclaimed_;
  }
}

std::vector<std::pair<uint64_t, bool>> DiskTier::take_completed() {
  std::lock_guard lock(mutex_);
  return std::exchange(completed_, {});
}

void DiskTier::flush() {
  std::unique_lock lock(mutex_);
  idle_.wait(lock, [&] { return queue_.empty() && !busy_; });
}

void DiskTier::run() {
  name_this_thread("mnemo-disk");
  std::unique_lock lock(mutex_);
  while (true) {
    work_ready_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) break;  // stopping, and every queued write is done
    // Take everything queued: one directory fsync makes the whole batch durable.
    std::deque<Job> batch = std::exchange(queue_, {});
    busy_ = true;
    lock.unlock();
    std::vector<std::pair<uint64_t, bool>> done;
    bool renamed_any = false;
    size_t batch_bytes = 0;
    std::vector<uint8_t> encoded = take_spare_buffer();
    for (Job& job : batch) {
      batch_bytes += job.queued_bytes();
      if (job.remove) {
        ::unlink(path_of(job.key).c_str());
        continue;
      }
      const bool ok = write_job(job, encoded);
      give_back_buffer(std::move(job.source));
      renamed_any |= ok;
      done.emplace_back(job.key, ok);
    }
    give_back_buffer(std::move(encoded));
    if (renamed_any) fsync_dir(dir_);
    lock.lock();
    queued_bytes_ -= batch_bytes;
    for (const auto& [key, ok] : done) {
      if (!ok) {
        auto it = extents_.find(key);
        if (it != extents_.end()) {
          used_bytes_ -= it->second;
          extents_.erase(it);
        }
      }
      completed_.emplace_back(key, ok);
    }
    busy_ = false;
    if (queue_.empty()) idle_.notify_all();
  }
  busy_ = false;
  idle_.notify_all();
}

Result<ExtentHeader> DiskTier::read_header(const std::string& path, size_t file_size, Defect* defect) const {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (defect != nullptr) *defect = Defect::kMalformed;
    return make_error(ErrorCode::kIoError, "{}: cannot open: {}", path, std::strerror(errno));
  }
  Result<ExtentHeader> result = read_header(fd, path, file_size, defect);
  ::close(fd);
  return result;
}

Result<ExtentHeader> DiskTier::read_header(int fd, const std::string& path, size_t file_size, Defect* defect) const {
  HeaderPrefix prefix{};
  Result<ExtentHeader> result = make_error(ErrorCode::kIoError, "{}: unreadable", path);
  Defect found = Defect::kMalformed;
  if (!read_all(fd, reinterpret_cast<uint8_t*>(&prefix), sizeof(prefix), 0)) {
    result = make_error(ErrorCode::kCorruption, "{}: truncated header", path);
  } else if (std::memcmp(prefix.magic, kMagic, sizeof(kMagic)) != 0) {
    result = make_error(ErrorCode::kCorruption, "{}: not a Mnemo KV extent", path);
  } else if (prefix.n_tokens < 0 || static_cast<size_t>(prefix.n_tokens) > kMaxTokens) {
    result = make_error(ErrorCode::kCorruption, "{}: bad token count {}", path, prefix.n_tokens);
  } else {
    const size_t head = header_bytes(static_cast<size_t>(prefix.n_tokens));
    std::vector<uint8_t> bytes(head);
    HeaderTrailer trailer{};
    if (!read_all(fd, bytes.data(), head, 0)) {
      result = make_error(ErrorCode::kCorruption, "{}: truncated header", path);
    } else {
      std::memcpy(&trailer, bytes.data() + head - sizeof(trailer), sizeof(trailer));
      // The checksum first: a damaged fingerprint must not pass for another model's extent.
      if (XXH3_64bits(bytes.data(), head - sizeof(trailer)) != trailer.header_hash) {
        result = make_error(ErrorCode::kCorruption, "{}: header checksum mismatch", path);
        found = Defect::kCorrupt;
      } else if (prefix.fingerprint != fingerprint_) {
        result = make_error("{}: written for another model or KV layout", path);
        found = Defect::kForeign;
      } else if (!valid_payload_size(trailer.payload_bytes)) {
        result = make_error("{}: holds {} payload bytes, this tier's extents hold {} (compact: {})", path,
                            trailer.payload_bytes, payload_bytes_, compact_payload_bytes_);
      } else if (file_size != head + trailer.payload_bytes) {
        result = make_error(ErrorCode::kCorruption, "{}: size {} does not match the extent's {} bytes", path, file_size, head + trailer.payload_bytes);
      } else {
        ExtentHeader h;
        h.ns = prefix.ns;
        h.key = prefix.key;
        h.parent_key = prefix.parent_key;
        h.position = prefix.position;
        h.compact = trailer.payload_bytes != payload_bytes_;
        h.payload_hash = trailer.payload_hash;
        h.tokens.resize(static_cast<size_t>(prefix.n_tokens));
        copy_bytes(h.tokens.data(), bytes.data() + sizeof(prefix), h.tokens.size() * sizeof(int32_t));
        result = std::move(h);
      }
    }
  }
  if (!result.ok() && defect != nullptr) *defect = found;
  return result;
}

std::vector<ExtentHeader> DiskTier::scan() {
  flush();
  ScanStats stats;
  std::string first_problem;
  std::vector<Found> intact;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir_, ec)) {
    const std::string path = entry.path().string();
    const std::string ext = entry.path().extension().string();
    if (ext == kTempSuffix) {
      ::unlink(path.c_str());  // a write a crash interrupted
      ++stats.temporaries;
      continue;
    }
    if (ext != kExtentSuffix || !entry.is_regular_file(ec)) continue;
    ++stats.scanned;
    const auto size = static_cast<size_t>(entry.file_size(ec));
    Defect defect = Defect::kMalformed;
    auto header = read_header(path, size, &defect);
    // Compare names, not paths: a `dir_` ending in '/' spells the same file differently.
    if (header.ok() && entry.path().filename() != std::filesystem::path(path_of(header->key)).filename()) {
      header = make_error(ErrorCode::kCorruption, "{}: holds key {:016x}", path, header->key);
    }
    if (header.ok()) {
      intact.push_back(Found{std::move(*header), static_cast<int64_t>(size)});
      continue;
    }
    if (defect == Defect::kForeign) {
      ++stats.foreign;  // another model's extents stay for it
      continue;
    }
    ::unlink(path.c_str());
    ++(defect == Defect::kCorrupt ? stats.dropped_corrupt : stats.dropped_malformed);
    if (first_problem.empty()) first_problem = header.error().message();
  }

  std::vector<ExtentHeader> headers;
  {
    std::lock_guard lock(mutex_);
    headers = classify_locked(intact, stats);
    last_scan_ = stats;
  }
  std::string line = describe_scan(dir_, stats);
  if (!first_problem.empty()) line += "; first: " + first_problem;
  std::fprintf(stderr, "mnemo: %s\n", line.c_str());
  return headers;
}

std::vector<ExtentHeader> DiskTier::classify_locked(std::vector<Found>& intact, ScanStats& stats) {
  // Reachable from a sequence's start through intact extents: what the index can rebuild. An
  // extent the tier already knows (a second scan) is its own start.
  std::unordered_multimap<uint64_t, size_t> children_of;
  std::vector<size_t> reachable;
  for (size_t i = 0; i < intact.size(); ++i) {
    const ExtentHeader& h = intact[i].header;
    if (h.parent_key == 0 || extents_.count(h.key) != 0 || extents_.count(h.parent_key) != 0) {
      reachable.push_back(i);
    } else {
      children_of.emplace(h.parent_key, i);
    }
  }
  std::vector<bool> listed(intact.size(), false);
  for (size_t next = 0; next < reachable.size(); ++next) {  // file names are unique keys: each once
    listed[reachable[next]] = true;
    const auto [begin, end] = children_of.equal_range(intact[reachable[next]].header.key);
    for (auto it = begin; it != end; ++it) reachable.push_back(it->second);
  }

  std::vector<ExtentHeader> headers;
  orphans_.clear();
  orphans_by_depth_.clear();
  orphan_bytes_ = 0;
  for (size_t i = 0; i < intact.size(); ++i) {
    Found& f = intact[i];
    if (!listed[i]) {
      orphans_.emplace(f.header.key, Orphan{f.bytes, f.header.position});
      orphans_by_depth_.emplace(f.header.position, f.header.key);
      orphan_bytes_ += f.bytes;
      ++stats.orphaned;
      continue;
    }
    const auto it = extents_.try_emplace(f.header.key, 0).first;  // a second scan must not count it twice
    used_bytes_ += f.bytes - it->second;
    it->second = f.bytes;
    ++stats.kept;
    headers.push_back(std::move(f.header));
  }
  std::sort(headers.begin(), headers.end(),
            [](const ExtentHeader& a, const ExtentHeader& b) { return a.position < b.position; });
  return headers;
}

std::string describe_scan(const std::string& dir, const DiskTier::ScanStats& stats) {
  return fmt::format(
      "KV disk tier {}: extents scanned {}: kept {}, dropped {} (header checksum) + {} (malformed), "
      "orphaned {} (kept on disk, not indexed: an earlier chunk's extent is missing or damaged), "
      "another model's {} (left alone); interrupted writes deleted {}",
      dir, stats.scanned, stats.kept, stats.dropped_corrupt, stats.dropped_malformed, stats.orphaned, stats.foreign,
      stats.temporaries);
}

Status DiskTier::read(uint64_t key, std::span<uint8_t> out) const {
  const std::string path = path_of(key);
  if (!valid_payload_size(out.size())) return make_error("{}: read of {} bytes, extents hold {}", path, out.size(), payload_bytes_);
  // One open: the header, then the payload, of the same file.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return make_error(ErrorCode::kNotFound, "{}: missing: {}", path, std::strerror(errno));
  struct stat st {};
  Result<ExtentHeader> header = ::fstat(fd, &st) == 0 ? read_header(fd, path, static_cast<size_t>(st.st_size))
                                                      : Result<ExtentHeader>(make_error(ErrorCode::kIoError, "{}: cannot stat", path));
  Status status = ok_status();
  if (!header.ok()) {
    status = header.error();
  } else if (header->key != key) {
    status = make_error(ErrorCode::kCorruption, "{}: holds key {:016x}", path, header->key);
  } else if (const size_t stored = header->compact ? compact_payload_bytes_ : payload_bytes_; out.size() != stored) {
    status = make_error("{}: holds {} payload bytes, {} asked for", path, stored, out.size());
  } else if (!read_all(fd, out.data(), out.size(), static_cast<off_t>(header_bytes(header->tokens.size())))) {
    status = make_error(ErrorCode::kCorruption, "{}: truncated payload", path);
  } else if (XXH3_64bits(out.data(), out.size()) != header->payload_hash) {
    status = make_error(ErrorCode::kCorruption, "{}: payload checksum mismatch", path);
  }
  ::close(fd);
  return status;
}

}  // namespace mnemo

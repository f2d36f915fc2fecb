// libFuzzer target for the KV disk tier (kv/disk_tier.h): the input, as an extent file in a
// directory, must be listed by scan(), orphaned or dropped, never crash it or read outside the
// file; a listed extent's read() must fail or return exactly the file's payload; a dropped one
// must never be read back. An orphan (intact, its parent's extent missing: a lone extent whose
// header names a parent) stays on disk unlisted and readable, as kv/disk_tier.h says.
//
// Input: one byte of flags, then the file. The flags repair what random bytes rarely get right,
// so the fuzzer also reaches the checks behind the checksums: bit 0 the magic and fingerprint,
// bit 1 the payload size field, bit 2 the header checksum, bit 3 the payload checksum; bit 4
// names the file after another key than the one in its header.
//   build/fuzz/fuzz/disk_tier_fuzz -max_len=512 -max_total_time=120
#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <system_error>
#include <vector>

#include <xxhash.h>

#include "kv/disk_tier.h"

namespace {

constexpr uint64_t kFingerprint = 0x6d6e656d6f6b7631ULL;
constexpr size_t kPayload = 32;
// The extent layout (disk_tier.cpp): a 48-byte prefix (magic 8, fingerprint 8, ns, key, parent
// key 8 each, position 4, token count 4), the tokens, a 24-byte trailer (payload size, payload
// checksum, header checksum), the payload.
constexpr size_t kPrefix = 48;
constexpr size_t kTrailer = 24;
constexpr size_t kKeyAt = 24;
constexpr size_t kTokensAt = 44;
constexpr size_t kMaxTokens = 1 << 16;

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "disk_tier_fuzz: %s\n", what);
  std::abort();
}

// The directory every input's extent goes to, made once and removed at exit. A plain buffer: a
// static std::string would be destroyed before the atexit handler that removes the directory runs.
const char* work_dir() {
  static char dir[] = "/tmp/mnemo-disk-tier-fuzz-XXXXXX";
  static const bool made = [] {
    if (::mkdtemp(dir) == nullptr) fail("mkdtemp failed");
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    });
    return true;
  }();
  (void)made;
  return dir;
}

void empty_dir(const std::string& dir) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) std::filesystem::remove_all(entry.path(), ec);
}

template <class T>
T load(const std::vector<uint8_t>& bytes, size_t at) {
  T v{};
  std::memcpy(&v, bytes.data() + at, sizeof(T));
  return v;
}
template <class T>
void store(std::vector<uint8_t>& bytes, size_t at, T v) {
  std::memcpy(bytes.data() + at, &v, sizeof(T));
}

// Applies the repairs the flags ask for, where the file is long enough to hold the field.
void repair(std::vector<uint8_t>& file, uint8_t flags) {
  if (file.size() < kPrefix) return;
  if (flags & 1) {
    std::memcpy(file.data(), "MNEMOKV1", 8);
    store(file, 8, kFingerprint);
  }
  const auto n_tokens = load<int32_t>(file, kTokensAt);
  if (n_tokens < 0 || static_cast<size_t>(n_tokens) > kMaxTokens) return;
  const size_t head = kPrefix + 4 * static_cast<size_t>(n_tokens) + kTrailer;
  if (file.size() < head) return;
  if (flags & 2) store<uint64_t>(file, head - kTrailer, kPayload);
  if (flags & 8) store<uint64_t>(file, head - 16, XXH3_64bits(file.data() + head, file.size() - head));
  if (flags & 4) store<uint64_t>(file, head - 8, XXH3_64bits(file.data(), head - kTrailer));
}

bool write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t w = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (w <= 0) break;
    done += static_cast<size_t>(w);
  }
  ::close(fd);
  return done == bytes.size();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t flags = data[0];
  std::vector<uint8_t> file(data + 1, data + size);
  repair(file, flags);
  uint64_t key = file.size() >= kPrefix ? load<uint64_t>(file, kKeyAt) : 1;
  if (flags & 16) key ^= 1;

  const std::string dir = work_dir();
  empty_dir(dir);
  auto opened = mnemo::DiskTier::open(dir, kFingerprint, kPayload, int64_t{1} << 30);
  if (!opened.ok()) fail("cannot open the disk tier");
  std::unique_ptr<mnemo::DiskTier> owner = std::move(*opened);
  mnemo::DiskTier& tier = *owner;
  const std::string path = tier.path_of(key);
  if (!write_file(path, file)) fail("cannot write the extent file");

  const std::vector<mnemo::ExtentHeader> headers = tier.scan();
  if (headers.size() > 1) fail("scan listed more extents than there are files");
  std::vector<uint8_t> out(kPayload, 0);
  const mnemo::Status read = tier.read(key, out);
  static const bool verbose = std::getenv("DISK_TIER_FUZZ_VERBOSE") != nullptr;  // for replaying an input
  if (verbose) {
    std::fprintf(stderr, "disk_tier_fuzz: %zu-byte file, %zu listed, read: %s\n", file.size(), headers.size(),
                 read.ok() ? "ok" : read.error().message().c_str());
  }
  if (headers.empty()) {
    const bool orphaned = tier.stats().orphans == 1;
    if (read.ok() && !orphaned) fail("read() served an extent scan() dropped");
    if (tier.used_bytes() != 0) fail("an unlisted extent is counted");
  } else {
    const mnemo::ExtentHeader& h = headers[0];
    if (h.key != key) fail("scan listed an extent under another key's name");
    if (h.tokens.size() > kMaxTokens) fail("scan listed too many tokens");
    const size_t head = kPrefix + 4 * h.tokens.size() + kTrailer;
    if (file.size() != head + kPayload) fail("scan listed an extent of the wrong size");
    if (tier.used_bytes() != static_cast<int64_t>(file.size())) fail("used_bytes is not the listed extent's size");
    if (!std::filesystem::exists(path)) fail("a listed extent is gone");
    if (read.ok() && std::memcmp(out.data(), file.data() + head, kPayload) != 0) fail("read() returned other bytes");
    // A second scan lists it again and counts it once.
    if (tier.scan().size() != 1 || tier.used_bytes() != static_cast<int64_t>(file.size())) fail("second scan differs");
  }
  std::vector<uint8_t> wrong(kPayload + 1);
  if (tier.read(key, wrong).ok()) fail("read() into a buffer of the wrong size succeeded");
  owner.reset();  // joins the tier's thread before the files go
  empty_dir(dir);
  return 0;
}

// libFuzzer target for the KV transfer wire format (transfer/kv_message.h): decode() must reject
// any input it cannot fully verify, with a reason, never crash or read outside the input; what it
// accepts must encode back to exactly the input bytes (the format is canonical).
//
// Input: one byte of flags, then the message. Bit 0 rewrites the trailing checksum so the fuzzer
// also reaches the structural checks and the accept path behind it.
//   build/fuzz/fuzz/kv_message_fuzz -max_len=4096 -max_total_time=120
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <vector>

#include <xxhash.h>

#include "transfer/kv_message.h"

namespace {

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "kv_message_fuzz: %s\n", what);
  std::abort();
}

void repair_checksum(std::vector<uint8_t>& bytes) {
  if (bytes.size() < mnemo::transfer::kKvChecksumBytes) return;
  const size_t covered = bytes.size() - mnemo::transfer::kKvChecksumBytes;
  const uint64_t h = XXH3_64bits(bytes.data(), covered);
  for (size_t i = 0; i < 8; ++i) bytes[covered + i] = static_cast<uint8_t>(h >> (8 * i));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t flags = data[0];
  std::vector<uint8_t> bytes(data + 1, data + size);  // exactly sized: ASan sees any overread
  if (flags & 1) repair_checksum(bytes);
  auto decoded = mnemo::transfer::decode(bytes);
  if (!decoded.ok()) {
    if (decoded.error().message().empty()) fail("an error without a reason");
    return 0;
  }
  if (!mnemo::transfer::check_encodable(*decoded).ok()) fail("decoded a message that cannot be encoded");
  if (mnemo::transfer::encode(*decoded) != bytes) fail("an accepted message does not encode back to its bytes");
  return 0;
}

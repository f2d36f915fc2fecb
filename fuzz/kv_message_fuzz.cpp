// libFuzzer target for the KV transfer wire format (transfer/kv_message.h): decode() must reject
// any input it cannot fully verify, with a reason, never crash or read outside the input; what it
// accepts must encode back to exactly the input bytes (the format is canonical).
//
// Input: one byte of flags, then the message. Bit 0 rewrites both checksums so the fuzzer also
// reaches the structural checks and the accept path behind them. Bit 1 signs the message under a
// fixed key (after the checksums: sealing writes the header checksum again) and decodes it with
// that key, so the signed path is reached too; without it, decode() runs without a secret (which
// accepts unsigned messages only).
//   build/fuzz/fuzz/kv_message_fuzz -max_len=4096 -max_total_time=120
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string_view>
#include <vector>

#include "transfer/kv_message.h"

namespace {

constexpr std::string_view kFuzzSecret = "kv-message-fuzz-secret-0123456789abcdef";

uint64_t load_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t{p[i]} << (8 * i);
  return v;
}

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "kv_message_fuzz: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace t = mnemo::transfer;
  if (size == 0) return 0;
  const uint8_t flags = data[0];
  std::vector<uint8_t> bytes(data + 1, data + size);  // exactly sized: ASan sees any overread
  if (flags & 1) t::update_checksums(bytes);
  const bool sign = (flags & 2) != 0 && bytes.size() >= t::kKvMessageHeaderBytes;
  const std::string_view secret = sign ? kFuzzSecret : std::string_view();
  if (sign) {
    // Keep whatever sender and sequence the input holds: seal() writes them as given.
    const t::KvSeal as_is{load_u64(bytes.data() + 8), load_u64(bytes.data() + 16)};
    t::seal(bytes, as_is, secret, t::body_digest(bytes));
  }
  auto decoded = t::decode(bytes, secret);
  if (!decoded.ok()) {
    if (decoded.error().message().empty()) fail("an error without a reason");
    return 0;
  }
  if (!t::check_encodable(*decoded).ok()) fail("decoded a message that cannot be encoded");
  const auto header = t::parse_header(bytes);
  if (!header.ok()) fail("decoded a message whose header does not parse");
  if (t::encode(*decoded, header->seal, secret) != bytes) fail("an accepted message does not encode back to its bytes");
  return 0;
}

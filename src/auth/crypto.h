// The cryptographic primitives the edge and the cluster rest on, from OpenSSL's libcrypto:
// HMAC-SHA-256, SHA-256, comparison in constant time and random bytes from the system's CSPRNG.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

namespace mnemo::auth {

using Digest = std::array<uint8_t, 32>;

Digest sha256(std::string_view data);
// HMAC-SHA-256 of the concatenation of `parts` under `key`.
Digest hmac_sha256(std::string_view key, std::initializer_list<std::string_view> parts);
// Equal in a time that depends on the lengths only, never on where the bytes first differ.
bool constant_time_equal(std::string_view a, std::string_view b);
// `bytes` random bytes from the CSPRNG, as lowercase hex (2 * bytes characters). Aborts if the
// CSPRNG fails: an id or nonce from a broken generator must never be handed out.
std::string random_hex(size_t bytes);
// A random 64-bit value from the CSPRNG (same failure rule).
uint64_t random_u64();
std::string to_hex(const Digest& digest);

}  // namespace mnemo::auth

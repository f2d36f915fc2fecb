#include "auth/crypto.h"

#include <cstdio>
#include <cstdlib>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

namespace mnemo::auth {
namespace {

[[noreturn]] void crypto_failure(const char* what) {
  std::fprintf(stderr, "mnemo: fatal: OpenSSL %s failed\n", what);
  std::abort();
}

void fill_random(unsigned char* out, size_t bytes) {
  if (RAND_bytes(out, static_cast<int>(bytes)) != 1) crypto_failure("RAND_bytes");
}

}  // namespace

Digest sha256(std::string_view data) {
  Digest out{};
  unsigned int length = 0;
  if (EVP_Digest(data.data(), data.size(), out.data(), &length, EVP_sha256(), nullptr) != 1 || length != out.size()) {
    crypto_failure("SHA-256");
  }
  return out;
}

Digest hmac_sha256(std::string_view key, std::initializer_list<std::string_view> parts) {
  EVP_MAC* mac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
  if (mac == nullptr) crypto_failure("EVP_MAC_fetch(HMAC)");
  EVP_MAC_CTX* ctx = EVP_MAC_CTX_new(mac);
  char digest_name[] = "SHA256";
  const OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string("digest", digest_name, 0), OSSL_PARAM_construct_end()};
  Digest out{};
  size_t length = 0;
  // EVP_MAC_init reads a null key as "keep the key set before", and fails on a fresh context:
  // an empty key without storage (a default string_view) must still be the empty key.
  static constexpr unsigned char kNoKeyBytes[1] = {0};
  const unsigned char* key_bytes = key.data() != nullptr ? reinterpret_cast<const unsigned char*>(key.data()) : kNoKeyBytes;
  bool ok = ctx != nullptr && EVP_MAC_init(ctx, key_bytes, key.size(), params) == 1;
  for (std::string_view part : parts) {
    ok = ok && EVP_MAC_update(ctx, reinterpret_cast<const unsigned char*>(part.data()), part.size()) == 1;
  }
  ok = ok && EVP_MAC_final(ctx, out.data(), &length, out.size()) == 1 && length == out.size();
  EVP_MAC_CTX_free(ctx);
  EVP_MAC_free(mac);
  if (!ok) crypto_failure("HMAC-SHA-256");
  return out;
}

bool constant_time_equal(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  return a.empty() || CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::string random_hex(size_t bytes) {
  std::string raw(bytes, '\0');
  fill_random(reinterpret_cast<unsigned char*>(raw.data()), bytes);
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(2 * bytes);
  for (unsigned char c : raw) {
    hex += kDigits[c >> 4];
    hex += kDigits[c & 15];
  }
  return hex;
}

uint64_t random_u64() {
  uint64_t value = 0;
  fill_random(reinterpret_cast<unsigned char*>(&value), sizeof(value));
  return value;
}

std::string to_hex(const Digest& digest) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(2 * digest.size());
  for (uint8_t c : digest) {
    hex += kDigits[c >> 4];
    hex += kDigits[c & 15];
  }
  return hex;
}

}  // namespace mnemo::auth

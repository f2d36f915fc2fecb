#include "auth/peer_signature.h"

#include <charconv>
#include <vector>

#include "auth/api_keys.h"
#include "auth/crypto.h"

namespace mnemo::auth {
namespace {

constexpr size_t kNonceHex = 32;
constexpr size_t kMaxSeenNonces = 1 << 20;  // bounds the replay cache under a flood

int64_t now_unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string mac_of(std::string_view secret, std::string_view time, std::string_view nonce, std::string_view method,
                   std::string_view path, std::string_view tenant, std::string_view body) {
  const std::string body_hash = to_hex(sha256(body));
  return to_hex(hmac_sha256(secret, {"mnemo-peer-v1\n", method, "\n", path, "\n", tenant, "\n", time, "\n", nonce, "\n", body_hash}));
}

std::vector<std::string_view> split(std::string_view text, char separator) {
  std::vector<std::string_view> parts;
  size_t begin = 0;
  for (;;) {
    const size_t end = text.find(separator, begin);
    parts.push_back(text.substr(begin, end == std::string_view::npos ? std::string_view::npos : end - begin));
    if (end == std::string_view::npos) return parts;
    begin = end + 1;
  }
}

bool is_hex(std::string_view text) {
  for (char c : text) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

}  // namespace

std::string PeerSigner::sign(std::string_view method, std::string_view path, std::string_view tenant,
                             std::string_view body) const {
  return sign_at(now_unix_ms(), random_hex(kNonceHex / 2), method, path, tenant, body);
}

std::string PeerSigner::sign_at(int64_t unix_ms, std::string_view nonce, std::string_view method, std::string_view path,
                                std::string_view tenant, std::string_view body) const {
  const std::string time = std::to_string(unix_ms);
  return "v1;" + time + ";" + std::string(nonce) + ";" + std::string(tenant) + ";" +
         mac_of(secret_, time, nonce, method, path, tenant, body);
}

Result<std::string> PeerVerifier::verify(std::string_view header, std::string_view method, std::string_view path,
                                         std::string_view body) {
  return verify_at(now_unix_ms(), header, method, path, body);
}

Result<std::string> PeerVerifier::verify_at(int64_t now_ms, std::string_view header, std::string_view method,
                                            std::string_view path, std::string_view body) {
  const auto parts = split(header, ';');
  if (parts.size() != 5 || parts[0] != "v1") return make_error("malformed peer signature");
  const std::string_view time = parts[1], nonce = parts[2], tenant = parts[3], mac = parts[4];
  int64_t signed_ms = 0;
  const auto [end, ec] = std::from_chars(time.data(), time.data() + time.size(), signed_ms);
  if (ec != std::errc() || end != time.data() + time.size()) return make_error("malformed peer signature time");
  if (nonce.size() != kNonceHex || !is_hex(nonce)) return make_error("malformed peer signature nonce");
  if (!tenant.empty() && !valid_tenant_name(tenant)) return make_error("malformed peer signature tenant");
  if (mac.size() != 64 || !is_hex(mac)) return make_error("malformed peer signature MAC");
  if (signed_ms < now_ms - window_ms_ || signed_ms > now_ms + window_ms_) {
    return make_error("peer signature outside the {} ms window (clock skew or a replay)", window_ms_);
  }
  if (!constant_time_equal(mac, mac_of(secret_, time, nonce, method, path, tenant, body))) {
    return make_error("peer signature does not match (another cluster secret, or a changed request)");
  }
  std::lock_guard lock(mutex_);
  // Nonces past the window are forgotten now and then (every 4,096 signatures), so the set holds
  // about one window's worth, not every nonce since start.
  if (++verified_since_prune_ >= 4096 || seen_.size() >= kMaxSeenNonces) {
    verified_since_prune_ = 0;
    std::erase_if(seen_, [now_ms](const auto& entry) { return entry.second < now_ms; });
    if (seen_.size() >= kMaxSeenNonces) return make_error("too many signed requests in the window");
  }
  // Forgettable once a copy would be outside the window anyway.
  if (!seen_.emplace(std::string(nonce), signed_ms + window_ms_).second) return make_error("peer signature replayed");
  return std::string(tenant);
}

}  // namespace mnemo::auth

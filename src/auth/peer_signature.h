// Signatures on internal HTTP calls between cluster members (a router to an instance, an
// instance to an instance). The public API and the internal surface share a port; what tells
// them apart is this header, a MAC under the cluster secret:
//
//   X-Mnemo-Peer: v1;<unix ms>;<nonce: 32 hex>;<tenant>;<HMAC-SHA-256 hex>
//
// over "mnemo-peer-v1", the method, the path (without the query), the tenant the caller acts
// for, the time, the nonce and SHA-256 of the body. A verifier accepts a signature once (nonces
// seen are kept for the window), within `window` of its own clock. The tenant is how a router
// forwards the client's identity: the instance trusts the signed tenant instead of re-checking
// an API key it may not hold.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

#include "util/result.h"

namespace mnemo::auth {

inline constexpr const char* kPeerHeader = "X-Mnemo-Peer";

class PeerSigner {
 public:
  explicit PeerSigner(std::string secret) : secret_(std::move(secret)) {}
  // The header value for one request.
  std::string sign(std::string_view method, std::string_view path, std::string_view tenant, std::string_view body) const;
  // At an explicit time and nonce (tests).
  std::string sign_at(int64_t unix_ms, std::string_view nonce, std::string_view method, std::string_view path,
                      std::string_view tenant, std::string_view body) const;

 private:
  std::string secret_;
};

class PeerVerifier {
 public:
  explicit PeerVerifier(std::string secret, std::chrono::milliseconds window = std::chrono::seconds(120))
      : secret_(std::move(secret)), window_ms_(window.count()) {}
  // The tenant the signed request acts for, or why the signature is refused (malformed, stale,
  // replayed, or a MAC that does not match).
  Result<std::string> verify(std::string_view header, std::string_view method, std::string_view path,
                             std::string_view body);
  Result<std::string> verify_at(int64_t now_ms, std::string_view header, std::string_view method, std::string_view path,
                                std::string_view body);

 private:
  std::string secret_;
  int64_t window_ms_;
  std::mutex mutex_;
  std::unordered_map<std::string, int64_t> seen_;  // nonce -> when it may be forgotten (unix ms)
  uint64_t verified_since_prune_ = 0;
};

}  // namespace mnemo::auth

// Who is calling: a client, known by its API key's tenant, or a cluster peer (a router, another
// instance), known by a signature under the cluster secret (auth/peer_signature.h) and acting for
// the tenant it names. Only peers reach the internal surface (/v1/internal/*, `mnemo_*` fields).
//
// Without API keys the server is single-tenant: every client is the tenant "", whatever
// Authorization header it sends. Without a cluster secret no request is a peer, unless the
// instance runs in a loopback-only cluster (`unsigned_peers`), where the router's unsigned
// "X-Mnemo-Peer: v0;<tenant>" is believed: anyone on the machine could send it, which is why
// such a cluster refuses any address that is not loopback.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "auth/api_keys.h"
#include "auth/peer_signature.h"
#include "server/api_error.h"

namespace mnemo::server {

struct Caller {
  std::string tenant;  // "" in a single-tenant server
  bool peer = false;   // a cluster member: may use the internal surface
};

struct CallerAuthConfig {
  auth::ApiKeys api_keys;       // empty: single-tenant, no key needed
  std::string metrics_key;      // empty: /metrics takes any API key (or none without keys)
  std::string cluster_secret;   // empty: no signed peers
  bool unsigned_peers = false;  // a loopback-only cluster without a secret
};

class CallerAuth {
 public:
  explicit CallerAuth(CallerAuthConfig config);

  // Checked before the body is read: a request without a valid API key (when keys are set) and
  // without a peer header gets this 401.
  std::optional<ApiError> admit(std::string_view authorization, bool has_peer_header) const;
  // The caller, once the body is read (a peer signature covers it).
  std::variant<Caller, ApiError> identify(std::string_view method, std::string_view path, std::string_view authorization,
                                          std::string_view peer_header, std::string_view body);
  // Whether /metrics may be read with this Authorization header.
  bool metrics_allowed(std::string_view authorization) const;
  bool requires_keys() const { return !config_.api_keys.empty(); }

  uint64_t refused_keys() const { return refused_keys_.load(); }
  uint64_t refused_peers() const { return refused_peers_.load(); }

 private:
  CallerAuthConfig config_;
  std::unique_ptr<auth::PeerVerifier> verifier_;  // with a cluster secret
  mutable std::atomic<uint64_t> refused_keys_{0};
  std::atomic<uint64_t> refused_peers_{0};
};

// 400 if a client (not a peer) sent a field of the internal surface (a top-level `mnemo_*` key).
std::optional<ApiError> refuse_internal_fields(const nlohmann::json& body, const Caller& caller);

}  // namespace mnemo::server

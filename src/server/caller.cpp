#include "server/caller.h"

#include <cstdio>

#include "auth/crypto.h"

namespace mnemo::server {
namespace {

ApiError missing_key() {
  return ApiError{401, "Incorrect or missing API key (Authorization: Bearer ...).", "invalid_request_error", "", "invalid_api_key"};
}

ApiError refused_peer(const std::string& why) {
  return ApiError{401, "cluster peer refused: " + why, "invalid_request_error", "", "invalid_peer_signature"};
}

}  // namespace

CallerAuth::CallerAuth(CallerAuthConfig config) : config_(std::move(config)) {
  if (!config_.cluster_secret.empty()) verifier_ = std::make_unique<auth::PeerVerifier>(config_.cluster_secret);
}

std::optional<ApiError> CallerAuth::admit(std::string_view authorization, bool has_peer_header) const {
  if (has_peer_header || config_.api_keys.empty()) return std::nullopt;
  if (config_.api_keys.tenant_of_authorization(authorization)) return std::nullopt;
  refused_keys_.fetch_add(1);
  return missing_key();
}

std::variant<Caller, ApiError> CallerAuth::identify(std::string_view method, std::string_view path,
                                                    std::string_view authorization, std::string_view peer_header,
                                                    std::string_view body) {
  if (!peer_header.empty()) {
    if (verifier_) {
      auto tenant = verifier_->verify(peer_header, method, path, body);
      if (tenant.ok()) return Caller{std::move(*tenant), true};
      refused_peers_.fetch_add(1);
      return refused_peer(tenant.error().message());
    }
    constexpr std::string_view kUnsigned = "v0;";
    if (config_.unsigned_peers && peer_header.substr(0, kUnsigned.size()) == kUnsigned) {
      const std::string_view tenant = peer_header.substr(kUnsigned.size());
      if (tenant.empty() || auth::valid_tenant_name(tenant)) return Caller{std::string(tenant), true};
    }
    refused_peers_.fetch_add(1);
    return refused_peer("this instance has no cluster secret (--cluster-secret-file)");
  }
  if (config_.api_keys.empty()) return Caller{"", false};
  auto tenant = config_.api_keys.tenant_of_authorization(authorization);
  if (!tenant) {
    refused_keys_.fetch_add(1);
    return missing_key();
  }
  return Caller{std::move(*tenant), false};
}

bool CallerAuth::metrics_allowed(std::string_view authorization) const {
  if (!config_.metrics_key.empty()) {
    return auth::constant_time_equal(authorization, "Bearer " + config_.metrics_key);
  }
  return config_.api_keys.empty() || config_.api_keys.tenant_of_authorization(authorization).has_value();
}

std::optional<ApiError> refuse_internal_fields(const nlohmann::json& body, const Caller& caller) {
  if (caller.peer || !body.is_object()) return std::nullopt;
  for (const auto& [key, value] : body.items()) {
    if (key.rfind("mnemo_", 0) == 0) {
      return bad_request("'" + key + "' is an internal field of the cluster; clients may not send it", key);
    }
  }
  return std::nullopt;
}

}  // namespace mnemo::server

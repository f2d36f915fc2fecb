// The router's HTTP plumbing: OpenAI-shaped error replies, and its own requests to instances on
// behalf of a client's request: KV pushes, prefills, copies and deletes of stored turns.
//
// The router never passes a client's key on. It authenticates the client itself (it holds the
// same key file as the instances) and speaks to instances as a cluster peer acting for the
// client's tenant: each request signed under the cluster secret (auth/peer_signature.h), or, in a
// loopback-only cluster without a secret, marked unsigned ("v0;<tenant>").
#pragma once

#include <optional>

#include "auth/api_keys.h"

#include <chrono>
#include <string>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "http/message.h"

namespace mnemo::router {

struct UpstreamIdentity {
  auth::ApiKeys keys;          // empty: single-tenant (every client is the tenant "")
  std::string cluster_secret;  // empty: unsigned peer requests (loopback only)
};
// Set once at start, before any request (read without a lock afterwards).
void configure_upstream_identity(UpstreamIdentity identity);
// The cluster secret configured above ("" : none); member records are sealed under it.
const std::string& upstream_cluster_secret();
// The tenant of a client's Authorization header; nullopt if keys are set and it holds none of them.
std::optional<std::string> client_tenant(const std::string& authorization);
// The headers of a request to an instance acting for the client whose Authorization header is
// `authorization` (the router's own requests: "").
httplib::Headers upstream_headers(const std::string& authorization, const std::string& method, const std::string& path,
                                  const std::string& body);

void send_error(http::Response& res, int status, const std::string& message, const std::string& type,
                const std::string& code);

httplib::Result post_for(const std::string& authorization, const std::string& address, const std::string& path,
                         const nlohmann::json& body, std::chrono::duration<double> read_timeout);
httplib::Result post_for(const http::Request& client_request, const std::string& address, const std::string& path,
                         const nlohmann::json& body, std::chrono::duration<double> read_timeout);
httplib::Result delete_for(const std::string& authorization, const std::string& address, const std::string& path);

}  // namespace mnemo::router

#include "router/router_http.h"

#include "auth/peer_signature.h"

namespace mnemo::router {

using nlohmann::json;

void send_error(http::Response& res, int status, const std::string& message, const std::string& type,
                const std::string& code) {
  res.status = status;
  res.set_content(json{{"error", {{"message", message}, {"type", type}, {"param", nullptr}, {"code", code}}}}
                      .dump(-1, ' ', false, json::error_handler_t::replace),
                  "application/json");
}

namespace {

UpstreamIdentity& identity() {
  static UpstreamIdentity configured;
  return configured;
}

}  // namespace

void configure_upstream_identity(UpstreamIdentity configured) { identity() = std::move(configured); }

const std::string& upstream_cluster_secret() { return identity().cluster_secret; }

std::optional<std::string> client_tenant(const std::string& authorization) {
  if (identity().keys.empty()) return std::string();
  return identity().keys.tenant_of_authorization(authorization);
}

httplib::Headers upstream_headers(const std::string& authorization, const std::string& method, const std::string& path,
                                  const std::string& body) {
  httplib::Headers headers;
  const std::string tenant = client_tenant(authorization).value_or("");
  if (identity().cluster_secret.empty()) {
    headers.emplace(auth::kPeerHeader, "v0;" + tenant);
  } else {
    // The path signed is the path without its query, as the instance sees it.
    const std::string bare_path = path.substr(0, path.find('?'));
    headers.emplace(auth::kPeerHeader, auth::PeerSigner(identity().cluster_secret).sign(method, bare_path, tenant, body));
  }
  return headers;
}

httplib::Result post_for(const std::string& authorization, const std::string& address, const std::string& path,
                         const json& body, std::chrono::duration<double> read_timeout) {
  httplib::Client client(address);
  client.set_connection_timeout(std::chrono::seconds(2));
  client.set_read_timeout(read_timeout);
  const std::string text = body.dump(-1, ' ', false, json::error_handler_t::replace);
  return client.Post(path, upstream_headers(authorization, "POST", path, text), text, "application/json");
}
httplib::Result delete_for(const std::string& authorization, const std::string& address, const std::string& path) {
  httplib::Client client(address);
  client.set_connection_timeout(std::chrono::seconds(2));
  client.set_read_timeout(std::chrono::seconds(30));
  return client.Delete(path, upstream_headers(authorization, "DELETE", path, ""));
}
httplib::Result post_for(const http::Request& client_request, const std::string& address, const std::string& path,
                         const json& body, std::chrono::duration<double> read_timeout) {
  return post_for(client_request.header("Authorization"), address, path, body, read_timeout);
}

}  // namespace mnemo::router

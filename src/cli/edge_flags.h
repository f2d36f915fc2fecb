// The flags of the public edge shared by `serve` and `route`: API keys and their tenants, the
// metrics key, the cluster secret, the access log and the connection limits; and the checks that
// turn them into the server's CallerAuthConfig.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cluster/etcd_client.h"
#include "http/server.h"
#include "server/access_log.h"
#include "server/caller.h"
#include "util/result.h"

namespace mnemo::cli {

struct EdgeFlags {
  std::string api_key;
  std::string api_key_file;
  std::string metrics_key;
  std::string cluster_secret_file;
  std::string access_log = "text";
  cluster::EtcdEndpoint etcd;  // its url is the command's --cluster
  http::TlsFiles tls;
  int max_connections = 4096;
  std::string etcd_password_file;

  // --api-key, --api-key-file, --cluster-secret-file (serve and route).
  void add_auth_to(CLI::App* cmd);
  // --metrics-key, --access-log (serve).
  void add_server_to(CLI::App* cmd);
  // --max-connections, --ssl-cert-file, --ssl-key-file (serve and route).
  void add_listener_to(CLI::App* cmd);
  // The TLS pair checked, and the open-file limit raised to let max_connections clients in.
  Status prepare_listener() const;
  // --etcd-ca-file, --etcd-cert-file, --etcd-key-file, --etcd-user, --etcd-password-file (serve
  // and route): a secured etcd.
  void add_etcd_to(CLI::App* cmd);
  // How to reach the etcd at `url`, the password read from its file.
  Result<cluster::EtcdEndpoint> etcd_endpoint(const std::string& url) const;
  // The keys, the metrics key and the secret read and checked. `cluster_addresses`: every
  // address this process listens on or reaches in the cluster (none: not in a cluster). A cluster
  // without a secret runs only when all of them are loopback (with a warning), since any process
  // that reaches its ports could otherwise act as a member.
  Result<server::CallerAuthConfig> resolve(const std::vector<std::string>& cluster_addresses) const;
  server::AccessLogFormat access_log_format() const;
};

// Binds `host`:`port` (no SO_REUSEPORT) and holds it, without accepting, until released: a
// process that would start on a busy port learns it before spending time loading a model.
class PortReservation {
 public:
  static Result<PortReservation> take(const std::string& host, int port);
  PortReservation(PortReservation&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  PortReservation& operator=(PortReservation&&) = delete;
  ~PortReservation() { release(); }
  // Frees the port for the server's own socket.
  void release();

 private:
  explicit PortReservation(int fd) : fd_(fd) {}
  int fd_ = -1;
};

}  // namespace mnemo::cli

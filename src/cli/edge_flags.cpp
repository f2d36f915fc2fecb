#include "cli/edge_flags.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include <netdb.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "auth/cluster_secret.h"

namespace mnemo::cli {
namespace {

// Raises the soft limit on open descriptors towards the hard one, enough for `connections`
// clients and the server's own files; says so on stderr when the hard limit is lower.
void raise_open_file_limit(int connections) {
  constexpr rlim_t kOwnFiles = 1024;  // model, state, the cluster's sockets, logs
  const rlim_t wanted = static_cast<rlim_t>(connections) + kOwnFiles;
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur >= wanted) return;
  limit.rlim_cur = std::min(wanted, limit.rlim_max);
  if (::setrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur < wanted) {
    std::fprintf(stderr, "mnemo: warning: at most %llu open files (ulimit -n): fewer than --max-connections %d can be open\n",
                 static_cast<unsigned long long>(limit.rlim_cur), connections);
  }
}

}  // namespace

void EdgeFlags::add_auth_to(CLI::App* cmd) {
  cmd->add_option("--api-key", api_key, "Require 'Authorization: Bearer KEY' on /v1 (one key, its own tenant)");
  cmd->add_option("--api-key-file", api_key_file,
                  "API keys, one per line: `KEY` or `TENANT KEY` (a tenant owns its stored conversations and KV cache)");
  cmd->add_option("--cluster-secret-file", cluster_secret_file,
                  "Secret shared by every member of the cluster (at least 32 bytes): signs internal requests and KV "
                  "messages");
}

void EdgeFlags::add_server_to(CLI::App* cmd) {
  cmd->add_option("--metrics-key", metrics_key, "Key that /metrics requires (default: any API key, or none without keys)");
  cmd->add_option("--access-log", access_log, "A line per request on stderr")
      ->capture_default_str()
      ->check(CLI::IsMember({"text", "json", "off"}));
}

void EdgeFlags::add_listener_to(CLI::App* cmd) {
  cmd->add_option("--max-connections", max_connections,
                  "Client connections open at once (none holds a thread while it waits; more get 503)")
      ->capture_default_str()
      ->check(CLI::Range(8, 1 << 20));
  cmd->add_option("--ssl-cert-file", tls.cert_file, "PEM certificate (chain): serve HTTPS on the port")->check(CLI::ExistingFile);
  cmd->add_option("--ssl-key-file", tls.key_file, "PEM private key of --ssl-cert-file")->check(CLI::ExistingFile);
}

Status EdgeFlags::prepare_listener() const {
  if (tls.cert_file.empty() != tls.key_file.empty()) return make_error("--ssl-cert-file and --ssl-key-file go together");
  // Each connection is a descriptor: let thousands of clients in (up to the hard limit).
  raise_open_file_limit(max_connections);
  return ok_status();
}

void EdgeFlags::add_etcd_to(CLI::App* cmd) {
  cmd->add_option("--etcd-ca-file", etcd.ca_file, "CA certificate that etcd's (https) certificate is checked against")
      ->check(CLI::ExistingFile);
  cmd->add_option("--etcd-cert-file", etcd.cert_file, "Client certificate for an etcd that asks for one")->check(CLI::ExistingFile);
  cmd->add_option("--etcd-key-file", etcd.key_file, "Key of --etcd-cert-file")->check(CLI::ExistingFile);
  cmd->add_option("--etcd-user", etcd.user, "etcd user (etcd's own auth; with --etcd-password-file)");
  cmd->add_option("--etcd-password-file", etcd_password_file, "File holding the etcd user's password")->check(CLI::ExistingFile);
}

Result<cluster::EtcdEndpoint> EdgeFlags::etcd_endpoint(const std::string& url) const {
  cluster::EtcdEndpoint endpoint = etcd;
  endpoint.url = url;
  if (endpoint.user.empty() != etcd_password_file.empty()) {
    return make_error("--etcd-user and --etcd-password-file go together");
  }
  if (!etcd_password_file.empty()) {
    std::ifstream in(etcd_password_file);
    if (!in || !std::getline(in, endpoint.password)) return make_error("cannot read the etcd password from {}", etcd_password_file);
  }
  return endpoint;
}

server::AccessLogFormat EdgeFlags::access_log_format() const {
  if (access_log == "json") return server::AccessLogFormat::kJson;
  if (access_log == "off") return server::AccessLogFormat::kOff;
  return server::AccessLogFormat::kText;
}

Result<server::CallerAuthConfig> EdgeFlags::resolve(const std::vector<std::string>& cluster_addresses) const {
  server::CallerAuthConfig config;
  if (!api_key_file.empty()) {
    MNEMO_ASSIGN_OR_RETURN(config.api_keys, auth::ApiKeys::from_file(api_key_file));
  }
  if (!api_key.empty()) MNEMO_RETURN_IF_ERROR(config.api_keys.merge(auth::ApiKeys::single(api_key)));
  config.metrics_key = metrics_key;
  if (!cluster_secret_file.empty()) {
    MNEMO_ASSIGN_OR_RETURN(config.cluster_secret, auth::read_cluster_secret(cluster_secret_file));
  } else if (!cluster_addresses.empty()) {
    for (const std::string& address : cluster_addresses) {
      if (!auth::is_loopback_host(auth::host_of(address))) {
        return make_error("a cluster without --cluster-secret-file runs on loopback addresses only; '{}' is not one", address);
      }
    }
    std::fprintf(stderr,
                 "mnemo: warning: no --cluster-secret-file: any process on this machine can act as a cluster member\n");
    config.unsigned_peers = true;
  }
  return config;
}


Result<PortReservation> PortReservation::take(const std::string& host, int port) {
  if (port == 0) return PortReservation(-1);  // any free port: nothing to reserve
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (const int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &found); rc != 0) {
    return make_error("cannot listen on {}:{}: {}", host, port, gai_strerror(rc));
  }
  const int fd = ::socket(found->ai_family, found->ai_socktype, found->ai_protocol);
  int yes = 1;
  const bool bound = fd >= 0 && ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes)) == 0 &&
                     ::bind(fd, found->ai_addr, found->ai_addrlen) == 0;
  const int bind_errno = errno;
  freeaddrinfo(found);
  if (!bound) {
    if (fd >= 0) ::close(fd);
    return make_error("cannot listen on {}:{}: {}", host, port, bind_errno == EADDRINUSE ? "address in use" : std::strerror(bind_errno));
  }
  return PortReservation(fd);
}

void PortReservation::release() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

}  // namespace mnemo::cli

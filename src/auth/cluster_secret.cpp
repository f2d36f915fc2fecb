#include "auth/cluster_secret.h"

#include <fstream>
#include <sstream>

namespace mnemo::auth {

Result<std::string> read_cluster_secret(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error("cluster secret file {}: cannot be read", path);
  std::ostringstream text;
  text << in.rdbuf();
  std::string secret = text.str();
  const auto first = secret.find_first_not_of(" \t\r\n");
  const auto last = secret.find_last_not_of(" \t\r\n");
  secret = first == std::string::npos ? std::string() : secret.substr(first, last - first + 1);
  if (secret.size() < kMinClusterSecretBytes) {
    return make_error("cluster secret file {}: holds {} bytes; a secret needs at least {} (e.g. `openssl rand -hex 32`)", path,
                      secret.size(), kMinClusterSecretBytes);
  }
  return secret;
}

std::string host_of(const std::string& address) {
  std::string rest = address;
  if (const auto scheme = rest.find("://"); scheme != std::string::npos) rest = rest.substr(scheme + 3);
  if (const auto slash = rest.find('/'); slash != std::string::npos) rest = rest.substr(0, slash);
  if (const auto at = rest.rfind('@'); at != std::string::npos) rest = rest.substr(at + 1);
  if (!rest.empty() && rest.front() == '[') {
    const auto close = rest.find(']');
    return close == std::string::npos ? rest.substr(1) : rest.substr(1, close - 1);
  }
  if (rest.find(':') != rest.rfind(':')) return rest;  // a bare IPv6 address
  if (const auto colon = rest.find(':'); colon != std::string::npos) rest = rest.substr(0, colon);
  return rest;
}

bool is_loopback_host(const std::string& host) {
  if (host == "localhost" || host == "::1") return true;
  // 127.0.0.0/8 as a dotted quad.
  if (host.rfind("127.", 0) != 0) return false;
  int dots = 0;
  for (char c : host) {
    if (c == '.') {
      ++dots;
    } else if (c < '0' || c > '9') {
      return false;
    }
  }
  return dots == 3;
}

}  // namespace mnemo::auth

#include "auth/cluster_secret.h"

#include <arpa/inet.h>
#include <netinet/in.h>

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
  // The authority ends at the path, the query or the fragment: an '@' after that is no userinfo
  // ("http://evil.com#@127.0.0.1" is evil.com).
  if (const auto end = rest.find_first_of("/?#"); end != std::string::npos) rest = rest.substr(0, end);
  if (const auto at = rest.rfind('@'); at != std::string::npos) rest = rest.substr(at + 1);
  if (!rest.empty() && rest.front() == '[') {
    const auto close = rest.find(']');
    return close == std::string::npos ? rest : rest.substr(1, close - 1);  // unclosed: no address
  }
  if (rest.find(':') != rest.rfind(':')) return rest;  // a bare IPv6 address
  if (const auto colon = rest.find(':'); colon != std::string::npos) rest = rest.substr(0, colon);
  return rest;
}

bool is_loopback_host(const std::string& host) {
  if (host == "localhost") return true;
  // Only text that is an address (as inet_pton reads it: dotted decimal without leading zeros,
  // or IPv6). Anything else, "127.0.0.256" or "127..1" too, is a name the resolver looks up
  // (through the search domains), which may resolve anywhere.
  if (host.find('\0') != std::string::npos) return false;
  in_addr v4{};
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;  // 127.0.0.0/8
  in6_addr v6{};
  if (inet_pton(AF_INET6, host.c_str(), &v6) == 1) return IN6_IS_ADDR_LOOPBACK(&v6);        // ::1
  return false;
}

}  // namespace mnemo::auth

// Host and port from the text a user or a peer gives: "host:port", "[v6]:port", or an http(s)
// URL. One parser for every client of the project (the HTTP client, etcd, the KV transport,
// loadgen), so they accept and refuse the same addresses with the same errors.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "util/result.h"

namespace mnemo {

struct NetAddress {
  std::string host;  // without brackets for IPv6
  int port = 0;
};

// "host:port" or "[v6]:port"; the port may be left out when `default_port` is given. The host
// must be non-empty and free of URL syntax (/ ? # @ [ ] and spaces); the port is 1..65535.
Result<NetAddress> parse_authority(std::string_view authority, std::optional<int> default_port = std::nullopt);

struct HttpUrl {
  bool tls = false;
  NetAddress address;
  std::string authority;  // as written ("host:port"): an HTTP Host header
  std::string path;       // after the authority ("" when none), not checked
};

// "http://authority[path]" or "https://...". A URL without a scheme is http when
// `bare_is_http`, else refused.
Result<HttpUrl> parse_http_url(std::string_view url, std::optional<int> default_port = std::nullopt,
                               bool bare_is_http = false);

}  // namespace mnemo

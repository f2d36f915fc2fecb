#include "util/net_address.h"

#include <charconv>

#include <fmt/format.h>

namespace mnemo {

Result<NetAddress> parse_authority(std::string_view authority, std::optional<int> default_port) {
  NetAddress out;
  std::string_view host;
  std::optional<std::string_view> port_text;
  if (authority.starts_with('[')) {
    const size_t close = authority.find(']');
    if (close == std::string_view::npos) return make_error("address '{}': unclosed '['", authority);
    host = authority.substr(1, close - 1);
    const std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return make_error("address '{}' is not [host]:port", authority);
      port_text = after.substr(1);
    }
  } else {
    const size_t colon = authority.rfind(':');
    if (colon != std::string_view::npos && authority.find(':') != colon) {
      return make_error("address '{}': an IPv6 host needs brackets ([host]:port)", authority);
    }
    host = authority.substr(0, colon);
    if (colon != std::string_view::npos) port_text = authority.substr(colon + 1);
  }
  if (host.empty()) return make_error("address '{}': no host", authority);
  if (host.find_first_of("/?#@[] ") != std::string_view::npos) return make_error("address '{}': malformed host", authority);
  if (!port_text) {
    if (!default_port) return make_error("address '{}': no port (expected host:port)", authority);
    out.port = *default_port;
  } else {
    const auto [end, ec] = std::from_chars(port_text->data(), port_text->data() + port_text->size(), out.port);
    if (port_text->empty() || ec != std::errc() || end != port_text->data() + port_text->size() || out.port < 1 ||
        out.port > 65535) {
      return make_error("address '{}': the port must be a number in 1..65535", authority);
    }
  }
  out.host = std::string(host);
  return out;
}

Result<HttpUrl> parse_http_url(std::string_view url, std::optional<int> default_port, bool bare_is_http) {
  HttpUrl out;
  std::string_view rest = url;
  if (rest.starts_with("https://")) {
    out.tls = true;
    rest.remove_prefix(8);
  } else if (rest.starts_with("http://")) {
    rest.remove_prefix(7);
  } else if (!bare_is_http || rest.find("://") != std::string_view::npos) {
    return make_error("url '{}': the scheme must be http:// or https://", url);
  }
  const size_t path = rest.find_first_of("/?#");
  const std::string_view authority = rest.substr(0, path);
  if (path != std::string_view::npos) out.path = std::string(rest.substr(path));
  auto address = parse_authority(authority, default_port);
  if (!address.ok()) return address.error().with_context(fmt::format("url '{}'", url));
  out.address = std::move(*address);
  out.authority = std::string(authority);
  return out;
}

}  // namespace mnemo

#include "server/cache_control.h"

#include <charconv>
#include <string>
#include <string_view>

#include <fmt/format.h>

namespace mnemo::server {
namespace {

constexpr const char* kShapes = R"({"type": "end"} or {"type": "ephemeral", "ttl": "5m"})";

// Seconds of a ttl: "<n>s", "<n>m", "<n>h", or a positive number of seconds. Bounded far below
// where a double loses whole seconds; the server's limit is checked later.
std::optional<double> ttl_seconds(const nlohmann::json& ttl) {
  constexpr double kMaxSeconds = 365.0 * 86400;
  if (ttl.is_number()) {
    const double s = ttl.get<double>();
    if (!(s > 0 && s <= kMaxSeconds)) return std::nullopt;
    return s;
  }
  if (!ttl.is_string()) return std::nullopt;
  const std::string& text = ttl.get_ref<const std::string&>();
  if (text.size() < 2 || text.size() > 12) return std::nullopt;
  int64_t n = 0;
  const char* end = text.data() + text.size() - 1;
  const auto [stop, ec] = std::from_chars(text.data(), end, n);
  if (ec != std::errc() || stop != end || n <= 0) return std::nullopt;
  const char unit = text.back();
  const double scale = unit == 's' ? 1 : unit == 'm' ? 60 : unit == 'h' ? 3600 : 0;
  const double s = static_cast<double>(n) * scale;
  if (!(s > 0 && s <= kMaxSeconds)) return std::nullopt;
  return s;
}

// A client's string as an error quotes it: bounded, so an error never echoes a body back, and
// cut between characters, so the error stays valid UTF-8.
std::string quoted(const std::string& text) {
  constexpr size_t kMax = 40;
  if (text.size() <= kMax) return fmt::format("'{}'", text);
  size_t cut = kMax;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  return fmt::format("'{}...'", std::string_view(text).substr(0, cut));
}

}  // namespace

std::optional<ApiError> read_cache_control(const nlohmann::json& control, GenerationRequest& out) {
  const auto refuse = [](const std::string& why) {
    return bad_request(fmt::format("'cache_control' must be {}: {}", kShapes, why), "cache_control");
  };
  if (!control.is_object()) return refuse("it is not an object");
  const nlohmann::json type_field = control.value("type", nlohmann::json());
  if (!type_field.is_string()) return refuse("its 'type' is missing or not a string");
  const std::string type = type_field.get<std::string>();
  if (type == "end") {
    if (control.size() != 1) return refuse("an end takes no other field");
    out.end_conversation = true;
    return std::nullopt;
  }
  if (type != "ephemeral") return refuse(fmt::format("unknown type {}", quoted(type)));
  double ttl = kDefaultCacheTtlSeconds;
  for (const auto& [name, value] : control.items()) {
    if (name == "type") continue;
    if (name != "ttl") return refuse(fmt::format("unknown field {}", quoted(name)));
    const auto seconds = ttl_seconds(value);
    if (!seconds) return refuse("'ttl' is not like \"30s\", \"5m\", \"1h\" or a positive number of seconds up to a year");
    ttl = *seconds;
  }
  out.cache_ttl_seconds = ttl;
  return std::nullopt;
}

}  // namespace mnemo::server

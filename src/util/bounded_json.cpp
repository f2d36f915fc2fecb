#include "util/bounded_json.h"

namespace mnemo {

int json_nesting_depth(std::string_view text, int stop_above) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    switch (c) {
      case '"': in_string = true; break;
      case '[':
      case '{':
        if (++depth > deepest) {
          deepest = depth;
          if (deepest > stop_above) return deepest;
        }
        break;
      case ']':
      case '}':
        if (depth > 0) --depth;
        break;
      default: break;
    }
  }
  return deepest;
}

Result<nlohmann::json> parse_bounded_json(std::string_view text, const JsonLimits& limits) {
  if (text.size() > limits.max_bytes) return make_error("JSON of {} bytes exceeds the limit of {}", text.size(), limits.max_bytes);
  if (json_nesting_depth(text, limits.max_depth) > limits.max_depth) {
    return make_error("JSON nested deeper than {} levels", limits.max_depth);
  }
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    return make_error("invalid JSON at byte {}", e.byte);
  } catch (const nlohmann::json::exception&) {
    return make_error("invalid JSON (a number out of range)");
  }
}

nlohmann::json parse_bounded_json_or_discarded(std::string_view text, const JsonLimits& limits) {
  auto parsed = parse_bounded_json(text, limits);
  return parsed.ok() ? std::move(*parsed) : nlohmann::json(nlohmann::json::value_t::discarded);
}

}  // namespace mnemo

#include "server/sse_json.h"

namespace mnemo {

std::string sse_json(const nlohmann::json& payload) {
  std::string text = payload.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  // U+2028 / U+2029 are E2 80 A8 / E2 80 A9 in UTF-8; E2 80 never starts anything else that ends
  // in A8 or A9, so a byte search finds exactly them.
  for (size_t at = text.find("\xE2\x80"); at != std::string::npos; at = text.find("\xE2\x80", at + 1)) {
    if (at + 2 < text.size() && (text[at + 2] == '\xA8' || text[at + 2] == '\xA9')) {
      text.replace(at, 3, text[at + 2] == '\xA8' ? "\\u2028" : "\\u2029");
    }
  }
  return text;
}

}  // namespace mnemo

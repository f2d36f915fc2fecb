// A JSON payload as one server-sent-events data line. JSON lets U+2028 and U+2029 stand unescaped
// inside strings, but clients that split the stream with a Unicode-aware line splitter (Python's
// str.splitlines, as requests' iter_lines(decode_unicode=True) does) break the line there; so
// they go out escaped, which any JSON parser reads back as the same characters.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace mnemo {

// The payload's compact JSON (invalid UTF-8 replaced) with U+2028 and U+2029 escaped.
std::string sse_json(const nlohmann::json& payload);

}  // namespace mnemo

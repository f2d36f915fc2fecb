// JSON from outside the process (requests, stored records, peers' and etcd's replies), parsed
// only within bounds: a byte limit and a nesting-depth limit checked by one linear scan BEFORE
// the parser runs, because nlohmann::json copies, dumps and compares nested values recursively
// (a body of 100,000 '[' overflows the stack in any of them).
#pragma once

#include <cstddef>
#include <string_view>

#include <nlohmann/json.hpp>

#include "util/result.h"

namespace mnemo {

struct JsonLimits {
  size_t max_bytes = size_t{64} << 20;
  int max_depth = 64;  // arrays and objects nested in each other
};

// The deepest nesting of arrays and objects in `text` (strings skipped, escapes honoured),
// stopping early once it passes `stop_above`.
int json_nesting_depth(std::string_view text, int stop_above);

// `text` parsed, or why not: too large, nested too deep, or not JSON (with the parser's
// position).
Result<nlohmann::json> parse_bounded_json(std::string_view text, const JsonLimits& limits = {});
// The same, for callers that only need to know whether it parsed: a discarded value (is_discarded())
// when it did not.
nlohmann::json parse_bounded_json_or_discarded(std::string_view text, const JsonLimits& limits = {});

}  // namespace mnemo

// Integer bounds of a JSON Schema (minimum, maximum, exclusiveMinimum, exclusiveMaximum on an
// integer) as a regular expression over the integer's JSON text, so that the schema matcher
// follows them byte by byte like a string's pattern: [lo, hi] split into runs whose digits
// share a prefix, one varying digit and free digits after it (the classic numeric-range regex),
// negative numbers as '-' and the range of their magnitudes. Canonical JSON integers only (no
// leading zeros, no "-0").
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "util/result.h"

namespace mnemo::grammar {

// Bounds beyond this magnitude are refused (a JSON number past 2^53 is not exact in most
// parsers, and the regex grows with the digits).
inline constexpr int64_t kMaxIntegerBound = 1'000'000'000'000'000;  // 10^15

// The pattern of the integers in [lo, hi] (either side open when absent). An Error when the
// range is empty or a bound is past kMaxIntegerBound.
Result<std::string> integer_range_pattern(std::optional<int64_t> lo, std::optional<int64_t> hi);

}  // namespace mnemo::grammar

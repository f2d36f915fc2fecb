// Memory sizes as people write them on a command line: "64M", "1.5GiB", "18432". The cache
// simulator's tiers are sized in bytes so that policies are compared at equal memory.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "util/result.h"

namespace mnemo::sim {

// A number (integer or decimal) with an optional binary suffix: K, M, G, T (powers of 1024),
// optionally followed by "B" or "iB" ("64M" = "64MB" = "64MiB" = 64 * 2^20); a plain number is
// bytes. An Error names the text when it is not a size or is negative.
Result<int64_t> parse_byte_size(std::string_view text);

// "64 MiB", "1.5 GiB", "512 B": for reports.
std::string format_byte_size(int64_t bytes);

}  // namespace mnemo::sim

#include "grammar/integer_range.h"

#include <string>
#include <vector>

#include <fmt/format.h>

namespace mnemo::grammar {
namespace {

int64_t power_of_ten(int k) {
  int64_t p = 1;
  for (int i = 0; i < k; ++i) p *= 10;
  return p;
}

int digits(int64_t n) { return n < 10 ? 1 : 1 + digits(n / 10); }

std::string joined(const std::vector<std::string>& alternatives) {
  std::string pattern;
  for (const std::string& a : alternatives) {
    if (!pattern.empty()) pattern.push_back('|');
    pattern.append(a);
  }
  return pattern;
}

// Alternatives for the non-negative integers [lo, hi], each a run "prefix [a-b] [0-9]{k}"; runs
// of whole decades (every number of k + 1 digits) in a row are one "[1-9][0-9]{a,b}", so that
// wide bounds stay within the regex's states.
void runs(int64_t lo, int64_t hi, std::vector<std::string>& out) {
  int whole_from = -1, whole_to = -1;  // the streak of whole decades: 10^k .. 10^(k+1) - 1
  const auto end_streak = [&] {
    if (whole_from < 0) return;
    out.push_back(whole_from == whole_to ? (whole_from == 0 ? std::string("[1-9]") : fmt::format("[1-9][0-9]{{{}}}", whole_from))
                                         : fmt::format("[1-9][0-9]{{{},{}}}", whole_from, whole_to));
    whole_from = whole_to = -1;
  };
  for (int64_t start = lo; start <= hi;) {
    // The largest block of 10^k numbers that starts at `start` and fits, then as many such
    // blocks as the digit at position k allows.
    int k = 0;
    // (From 0 only single digits: a block of 0 would write numbers with a leading zero.)
    while (start > 0 && start % power_of_ten(k + 1) == 0 && start + power_of_ten(k + 1) - 1 <= hi) ++k;
    const int64_t step = power_of_ten(k);
    int64_t blocks = 1;
    while ((start / step) % 10 + blocks <= 9 && start + (blocks + 1) * step - 1 <= hi) ++blocks;
    const int64_t end = start + blocks * step - 1;
    if (start == step && end == 10 * step - 1) {  // a whole decade
      if (whole_from < 0) whole_from = k;
      whole_to = k;
      start = end + 1;
      continue;
    }
    end_streak();
    const std::string first = std::to_string(start / step), last = std::to_string(end / step);
    const std::string digit = first.back() == last.back() ? std::string(1, first.back()) : fmt::format("[{}-{}]", first.back(), last.back());
    const std::string rest = k > 0 ? fmt::format("[0-9]{{{}}}", k) : std::string();
    out.push_back(fmt::format("{}{}{}", std::string_view(first).substr(0, first.size() - 1), digit, rest));
    start = end + 1;
  }
  end_streak();
}

// The non-negative integers from lo on (hi absent: without an upper bound).
std::string non_negative(int64_t lo, std::optional<int64_t> hi) {
  std::vector<std::string> alternatives;
  if (hi) {
    runs(lo, *hi, alternatives);
  } else {
    runs(lo, power_of_ten(digits(lo)) - 1, alternatives);
    alternatives.push_back(fmt::format("[1-9][0-9]{{{},}}", digits(lo)));  // every longer number
  }
  return joined(alternatives);
}

}  // namespace

Result<std::string> integer_range_pattern(std::optional<int64_t> lo, std::optional<int64_t> hi) {
  for (const std::optional<int64_t>& bound : {lo, hi}) {
    if (bound && (*bound > kMaxIntegerBound || *bound < -kMaxIntegerBound)) {
      return make_error("integer bounds beyond ±10^15 are not supported");
    }
  }
  if (lo && hi && *lo > *hi) return make_error("the integer range [{}, {}] is empty", *lo, *hi);
  std::vector<std::string> parts;
  // Negative numbers: '-' then a magnitude in [max(1, -hi), -lo].
  if (!lo || *lo < 0) {
    const int64_t least = hi && *hi < 0 ? -*hi : 1;
    parts.push_back(fmt::format("-({})", non_negative(least, lo ? std::optional<int64_t>(-*lo) : std::nullopt)));
  }
  if (!hi || *hi >= 0) parts.push_back(fmt::format("({})", non_negative(lo && *lo > 0 ? *lo : 0, hi)));
  return joined(parts);
}

}  // namespace mnemo::grammar

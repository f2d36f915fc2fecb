// Integer bounds as a pattern (grammar/integer_range.h): for closed, half-open and open ranges
// around zero, every integer from -1,200 to 1,200 matches exactly when it is in range, and no
// non-canonical text (a leading zero, "-0", a '+') ever does; wide bounds still compile.
#include <gtest/gtest.h>

#include <optional>
#include <string>

#include <fmt/format.h>

#include "grammar/integer_range.h"
#include "grammar/regex.h"

namespace mnemo::grammar {
namespace {

Regex compiled(std::optional<int64_t> lo, std::optional<int64_t> hi) {
  auto pattern = integer_range_pattern(lo, hi);
  EXPECT_TRUE(pattern.ok()) << (pattern.ok() ? "" : pattern.error().message());
  auto regex = Regex::compile(pattern.ok() ? *pattern : "x", /*anchored=*/true);
  EXPECT_TRUE(regex.ok()) << (pattern.ok() ? *pattern : "") << ": " << (regex.ok() ? "" : regex.error().message());
  return regex.ok() ? std::move(*regex) : *Regex::compile("x", true);
}

TEST(IntegerRange, EveryIntegerMatchesExactlyWhenInRange) {
  using Bound = std::optional<int64_t>;
  const std::vector<std::pair<Bound, Bound>> ranges = {
      {0, 0},    {0, 9},       {0, 10},      {1, 1},     {7, 13},        {10, 99},     {0, 100},       {18, 120},
      {99, 1000}, {123, 987},  {-5, 3},      {-100, -1}, {-1000, -999},  {-37, 0},     {std::nullopt, 42}, {42, std::nullopt},
      {0, std::nullopt}, {std::nullopt, -7}, {-250, std::nullopt}, {std::nullopt, std::nullopt}, {1, 999}, {5, 5000}};
  for (const auto& [lo, hi] : ranges) {
    const Regex r = compiled(lo, hi);
    const std::string name = fmt::format("[{}, {}]", lo ? std::to_string(*lo) : std::string("-inf"), hi ? std::to_string(*hi) : std::string("inf"));
    for (int64_t n = -1200; n <= 1200; ++n) {
      const bool in = (!lo || n >= *lo) && (!hi || n <= *hi);
      ASSERT_EQ(r.matches(std::to_string(n)), in) << name << " on " << n;
    }
    for (const char* odd : {"-0", "00", "007", "+5", "", "-", "1.0", "1e3", "--1"}) EXPECT_FALSE(r.matches(odd)) << name << " on " << odd;
  }
}

TEST(IntegerRange, WideBoundsCompileAndHold) {
  const Regex r = compiled(-kMaxIntegerBound, kMaxIntegerBound);
  EXPECT_TRUE(r.matches("1000000000000000"));
  EXPECT_FALSE(r.matches("1000000000000001"));
  EXPECT_TRUE(r.matches("-999999999999999"));
  const Regex odd = compiled(123456789, 987654321);
  EXPECT_TRUE(odd.matches("123456789"));
  EXPECT_TRUE(odd.matches("555555555"));
  EXPECT_FALSE(odd.matches("123456788"));
  EXPECT_FALSE(odd.matches("987654322"));
  EXPECT_FALSE(integer_range_pattern(5, 4).ok());
  EXPECT_FALSE(integer_range_pattern(0, kMaxIntegerBound + 1).ok());
}

}  // namespace
}  // namespace mnemo::grammar

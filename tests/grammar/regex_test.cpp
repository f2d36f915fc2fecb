// Regex on exact inputs: what each construct matches and refuses, JSON Schema's search
// semantics for unanchored patterns, the formats, and the errors that name what is unsupported.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "grammar/regex.h"

namespace mnemo::grammar {
namespace {

Regex anchored(const std::string& pattern) {
  auto r = Regex::compile(pattern, /*anchored=*/true);
  EXPECT_TRUE(r.ok()) << pattern << ": " << r.error().message();
  return r.ok() ? std::move(*r) : *Regex::compile("", true);
}

TEST(Regex, ConstructsMatchExactly) {
  const std::vector<std::tuple<std::string, std::vector<std::string>, std::vector<std::string>>> cases = {
      {"abc", {"abc"}, {"", "ab", "abcd", "xabc"}},
      {"a|bc|", {"a", "bc", ""}, {"b", "abc"}},
      {"(ab)+c?", {"ab", "ababc", "abc"}, {"", "a", "abcab"}},
      {"x{2,3}", {"xx", "xxx"}, {"x", "xxxx"}},
      {"x{2,}y", {"xxy", "xxxxxxy"}, {"xy"}},
      {"x{3}", {"xxx"}, {"xx", "xxxx"}},
      {"[a-c0-2_]+", {"a0_", "cc22"}, {"d", "3", ""}},
      {"[^a-z]", {"A", "9", "\xc3"}, {"q", "\n"}},
      {"\\d\\w\\s\\.", {"7x .", "0_\t."}, {"7x a", "ax ."}},
      {"(?:a|b)*(?<tail>z)", {"z", "abbaz"}, {"abc"}},
      {".+", {"é", "a b"}, {"", "a\nb"}},
      {"[\\d.-]+", {"-1.5", "..."}, {"a"}},
      {"a+?b*?", {"a", "aab"}, {"b"}},  // lazy: the same whole matches
  };
  for (const auto& [pattern, yes, no] : cases) {
    const Regex r = anchored(pattern);
    for (const std::string& text : yes) EXPECT_TRUE(r.matches(text)) << pattern << " / " << text;
    for (const std::string& text : no) EXPECT_FALSE(r.matches(text)) << pattern << " / " << text;
  }
}

TEST(Regex, UnanchoredPatternsSearchAsJsonSchemaSays) {
  auto inside = Regex::compile("b+c", /*anchored=*/false);
  ASSERT_TRUE(inside.ok());
  EXPECT_TRUE(inside->matches("abbcd"));
  EXPECT_FALSE(inside->matches("acd"));
  auto prefix = Regex::compile("^ab", false);
  ASSERT_TRUE(prefix.ok());
  EXPECT_TRUE(prefix->matches("abzz"));
  EXPECT_FALSE(prefix->matches("zab"));
  auto suffix = Regex::compile("ab$", false);
  ASSERT_TRUE(suffix.ok());
  EXPECT_TRUE(suffix->matches("zzab"));
  EXPECT_FALSE(suffix->matches("abz"));
}

TEST(Regex, StepsRefuseAtTheFirstImpossibleByte) {
  const Regex r = anchored("[0-9]{3}-x");
  Regex::StateSet s = r.start();
  for (const char c : std::string("12")) s = r.step(s, static_cast<uint8_t>(c));
  EXPECT_FALSE(Regex::empty(s));
  EXPECT_FALSE(r.accepts(s));
  EXPECT_TRUE(Regex::empty(r.step(s, '-')));  // a third digit first
  s = r.step(r.step(r.step(s, '3'), '-'), 'x');
  EXPECT_TRUE(r.accepts(s));
}

TEST(Regex, Formats) {
  const std::vector<std::tuple<std::string, std::vector<std::string>, std::vector<std::string>>> cases = {
      {"date", {"2024-02-28", "1999-12-31", "0001-04-30"}, {"2024-13-01", "2024-1-01", "24-01-01", "2024-01-32", "0000-01-01", "2024-04-31", "2024-02-30"}},
      {"time", {"23:59:59Z", "08:00:00.123+02:00"}, {"24:00:00Z", "08:00:00", "8:00:00Z"}},
      {"date-time", {"2026-12-02T03:27:36Z"}, {"2026-12-02 03:27:36Z"}},
      {"email", {"ann.lee+x@example.co.uk", "a@b.io"}, {"a@b", "@b.io", "a b@c.io"}},
      {"uuid", {"123e4567-e89b-12d3-a456-426614174000"}, {"123e4567e89b12d3a456426614174000", "123E4567-e89b-12d3-a456-426614174000"}},
      {"ipv4", {"192.168.0.1", "0.0.0.0", "255.255.255.255"}, {"256.1.1.1", "1.2.3", "01.2.3.4"}},
      {"uri", {"https://example.org/a?b=c#d", "mailto:x@y.z"}, {"example.org", "https://a b"}},
  };
  for (const auto& [name, yes, no] : cases) {
    auto r = Regex::format(name);
    ASSERT_TRUE(r.ok()) << name << ": " << r.error().message();
    for (const std::string& text : yes) EXPECT_TRUE(r->matches(text)) << name << " / " << text;
    for (const std::string& text : no) EXPECT_FALSE(r->matches(text)) << name << " / " << text;
  }
  EXPECT_FALSE(Regex::format("hostname").ok());
}

TEST(Regex, RefusesWhatItCannotDoByName) {
  for (const auto& [pattern, says] : std::vector<std::pair<std::string, std::string>>{
           {"(a", "')'"}, {"a)", "')'"}, {"[ab", "']'"}, {"a{3,1}", "below"}, {"a{1000}", "above"},
           {"(?=a)", "lookaround"}, {"(a)\\1", "\\1"}, {"\\bword", "\\b"}, {"a**", "quantifier"}, {"*a", "nothing to repeat"},
           {"a^b", "'^'"}, {"(a{100}){100}", "states"}, {"[z-a]", "order"}}) {
    auto r = Regex::compile(pattern, true);
    ASSERT_FALSE(r.ok()) << pattern;
    EXPECT_NE(r.error().message().find(says), std::string::npos) << pattern << ": " << r.error().message();
  }
}

}  // namespace
}  // namespace mnemo::grammar

// parse_bounded_json: the size and the nesting depth are checked by one scan before the parser
// runs (strings skipped, escapes honoured); what fails is an Error, never an exception.
#include "util/bounded_json.h"

#include <gtest/gtest.h>

#include <chrono>
#include <initializer_list>
#include <string>

namespace mnemo {
namespace {

std::string nested(int depth, std::string_view inner = "") {
  return std::string(static_cast<size_t>(depth), '[') + std::string(inner) + std::string(static_cast<size_t>(depth), ']');
}

TEST(JsonNestingDepth, CountsArraysAndObjects) {
  EXPECT_EQ(json_nesting_depth("", 64), 0);
  EXPECT_EQ(json_nesting_depth("1", 64), 0);
  EXPECT_EQ(json_nesting_depth("[]", 64), 1);
  EXPECT_EQ(json_nesting_depth("{}", 64), 1);
  EXPECT_EQ(json_nesting_depth(R"({"a": [1, {"b": [[]]}], "c": {}})", 64), 5);
  EXPECT_EQ(json_nesting_depth("[[], [], [[]]]", 64), 3);
  EXPECT_EQ(json_nesting_depth(nested(10), 64), 10);
}

TEST(JsonNestingDepth, BracketsInsideStringsAreIgnored) {
  EXPECT_EQ(json_nesting_depth(R"({"a": "[[[[{{{{", "b": "]]]]}}}}"})", 64), 1);
  EXPECT_EQ(json_nesting_depth(R"(["[", "{", "]", "}"])", 64), 1);
  EXPECT_EQ(json_nesting_depth(R"({"[[[[": "x"})", 64), 1);
}

TEST(JsonNestingDepth, EscapedQuotesDoNotEndAString) {
  // "\"[[[" is one string: the escaped quote does not end it.
  EXPECT_EQ(json_nesting_depth(R"(["\"[[[", 1])", 64), 1);
  EXPECT_EQ(json_nesting_depth(R"(["a\"b\"[[[\"", 1])", 64), 1);
  // An escaped backslash does end before the quote: the brackets after it count.
  EXPECT_EQ(json_nesting_depth(R"(["\\", [[1]]])", 64), 3);
  EXPECT_EQ(json_nesting_depth(R"(["\\\"[[", [1]])", 64), 2);
  EXPECT_EQ(json_nesting_depth(R"(["\u005b\u005b", [1]])", 64), 2);
}

TEST(JsonNestingDepth, StopsOncePastTheLimit) {
  EXPECT_EQ(json_nesting_depth(std::string(100'000, '['), 64), 65);
  EXPECT_EQ(json_nesting_depth(nested(6), 5), 6);
  // Closing brackets without an opening one do not make the depth negative.
  EXPECT_EQ(json_nesting_depth("]]]]][[", 64), 2);
}

TEST(BoundedJson, ParsesWhatIsWithinBounds) {
  auto parsed = parse_bounded_json(R"({"model": "m", "messages": [{"role": "user", "content": "[{"}], "n": 2})");
  ASSERT_TRUE(parsed.ok()) << parsed.error().message();
  EXPECT_EQ((*parsed)["model"], "m");
  EXPECT_EQ((*parsed)["messages"][0]["content"], "[{");
  EXPECT_EQ((*parsed)["n"], 2);
}

TEST(BoundedJson, DeepNestingIsRefusedBeforeParsing) {
  const std::string deep(100'000, '[');
  const auto start = std::chrono::steady_clock::now();
  auto parsed = parse_bounded_json(deep);
  const auto elapsed = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(parsed.ok());
  // The depth scan refused it, not the parser (which would have found the end of the input).
  EXPECT_NE(parsed.error().message().find("nested deeper than 64"), std::string::npos) << parsed.error().message();
  EXPECT_LT(elapsed, std::chrono::milliseconds(100));
  // The same closed, and closed inside a larger valid document.
  EXPECT_FALSE(parse_bounded_json(nested(100'000)).ok());
  EXPECT_FALSE(parse_bounded_json(R"({"messages": [{"content": )" + nested(100'000, "1") + "}]}").ok());
  // Deep nesting after a string holding an escaped quote is still seen.
  EXPECT_FALSE(parse_bounded_json(R"(["\"", )" + nested(100'000) + "]").ok());
}

TEST(BoundedJson, DepthAtTheLimitIsAcceptedOneMoreIsRefused) {
  auto at = parse_bounded_json(nested(64, "1"));
  ASSERT_TRUE(at.ok()) << at.error().message();
  EXPECT_FALSE(parse_bounded_json(nested(65, "1")).ok());

  const JsonLimits limits{.max_bytes = 1024, .max_depth = 3};
  EXPECT_TRUE(parse_bounded_json(R"({"a": [{"b": 1}]})", limits).ok());
  EXPECT_FALSE(parse_bounded_json(R"({"a": [{"b": [1]}]})", limits).ok());
  EXPECT_TRUE(parse_bounded_json(R"({"a": [{"b": "[1]"}]})", limits).ok());
  // Siblings do not add up.
  EXPECT_TRUE(parse_bounded_json("[[[1]], [[2]], [[3]]]", limits).ok());

  const JsonLimits flat{.max_bytes = 1024, .max_depth = 0};
  EXPECT_TRUE(parse_bounded_json("\"x\"", flat).ok());
  EXPECT_FALSE(parse_bounded_json("[]", flat).ok());
}

TEST(BoundedJson, OverSizeIsRefused) {
  const JsonLimits limits{.max_bytes = 10, .max_depth = 64};
  EXPECT_TRUE(parse_bounded_json("[1,2,3,45]", limits).ok());  // 10 bytes
  auto over = parse_bounded_json("[1,2,3,456]", limits);       // 11 bytes
  ASSERT_FALSE(over.ok());
  EXPECT_NE(over.error().message().find("11 bytes"), std::string::npos) << over.error().message();
  // Refused by its size even when it is not JSON at all.
  EXPECT_NE(parse_bounded_json(std::string(11, '['), limits).error().message().find("bytes"), std::string::npos);
}

TEST(BoundedJson, InvalidJsonNamesTheByte) {
  for (const std::string text : {"", "{", "{\"a\": }", "[1, 2,]", "nul", "{\"a\" 1}", "\"unterminated", "[1] 2",
                                 "{'a': 1}", "[1 /* comment */]", "\"\xff\"", R"("\ud800")"}) {
    auto parsed = parse_bounded_json(text);
    ASSERT_FALSE(parsed.ok()) << text;
    EXPECT_NE(parsed.error().message().find("byte"), std::string::npos) << text << ": " << parsed.error().message();
  }
  EXPECT_NE(parse_bounded_json("{\"a\": }").error().message().find("byte 7"), std::string::npos)
      << parse_bounded_json("{\"a\": }").error().message();
}

TEST(BoundedJson, NumbersOutOfRangeAreAnErrorNotAnException) {
  for (const std::string& text :
       std::initializer_list<std::string>{"1e999", "-1e999", "[1e999]", "{\"temperature\": 1e400}", std::string(400, '9')}) {
    Result<nlohmann::json> parsed = nlohmann::json();
    ASSERT_NO_THROW(parsed = parse_bounded_json(text)) << text;
    EXPECT_FALSE(parsed.ok()) << text;
  }
  // Large but finite numbers parse.
  auto big = parse_bounded_json("[1e308, 18446744073709551615, -9223372036854775808]");
  ASSERT_TRUE(big.ok()) << big.error().message();
}

TEST(BoundedJson, WhatParsesCanBeCopiedAndDumped) {
  auto parsed = parse_bounded_json(nested(64, R"({"a": "\u00e9\ud83d\ude00"})"));
  ASSERT_FALSE(parsed.ok());  // 65 levels with the object
  parsed = parse_bounded_json(nested(63, R"({"a": "\u00e9\ud83d\ude00"})"));
  ASSERT_TRUE(parsed.ok()) << parsed.error().message();
  const nlohmann::json copy = *parsed;
  EXPECT_EQ(copy, *parsed);
  EXPECT_EQ(nlohmann::json::parse(copy.dump()), *parsed);
}

}  // namespace
}  // namespace mnemo

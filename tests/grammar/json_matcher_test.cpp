// JsonMatcher byte by byte: every valid document is accepted and completes, every invalid one is
// refused at the byte that breaks it (and that byte changes nothing), and the bounds hold.
#include <gtest/gtest.h>

#include <string>

#include "grammar/json_matcher.h"

namespace mnemo::grammar {
namespace {

// How many bytes of `text` a fresh matcher accepts before it refuses one.
size_t accepted_prefix(const std::string& text, bool object_root = true) {
  JsonMatcher m(object_root);
  size_t i = 0;
  while (i < text.size() && m.feed(static_cast<uint8_t>(text[i]))) ++i;
  return i;
}

bool completes(const std::string& text, bool object_root = true) {
  JsonMatcher m(object_root);
  return m.feed(text) && m.complete();
}

TEST(JsonMatcher, AcceptsValidObjectsAndCompletesOnTheirLastByte) {
  for (const std::string doc : {R"({})", R"( { "a" : 1 })", R"({"a":[1,2.5,-3e10,0.0,1E+2,-0],"b":{"c":null}})",
                                R"({"s":"quote \" backslash \\ slash \/ \b\f\n\r\t \u00e9 \uD83D\uDE00"})",
                                R"({"t":true,"f":false,"n":null,"e":[],"o":{},"nested":[[[{}]]]})",
                                "{\"utf8\":\"caf\xc3\xa9 \xf0\x9f\xa6\x99\"}"}) {
    JsonMatcher m;
    ASSERT_TRUE(m.feed(doc)) << doc;
    // Complete exactly at the closing brace.
    EXPECT_TRUE(m.complete()) << doc;
    EXPECT_FALSE(m.feed(static_cast<uint8_t>(' '))) << "nothing may follow: " << doc;
  }
}

TEST(JsonMatcher, RefusesTheByteThatBreaksTheDocument) {
  EXPECT_EQ(accepted_prefix(R"([1,2])"), 0u);              // the root must be an object
  EXPECT_EQ(accepted_prefix(R"({a:1})"), 1u);              // unquoted key
  EXPECT_EQ(accepted_prefix(R"({"a" 1})"), 5u);            // no colon
  EXPECT_EQ(accepted_prefix(R"({"a":1,})"), 7u);           // trailing comma
  EXPECT_EQ(accepted_prefix(R"({"a":01})"), 6u);           // leading zero
  EXPECT_EQ(accepted_prefix(R"({"a":1.})"), 7u);           // no fraction digit
  EXPECT_EQ(accepted_prefix(R"({"a":tru})"), 8u);          // broken literal
  EXPECT_EQ(accepted_prefix(R"({"a":"\x"})"), 7u);         // bad escape
  EXPECT_EQ(accepted_prefix(R"({"a":"\u12g4"})"), 10u);    // bad unicode escape
  EXPECT_EQ(accepted_prefix("{\"a\":\"line\nbreak\"}"), 10u);  // a raw control byte in a string
  EXPECT_EQ(accepted_prefix(R"({"a":[1}])"), 7u);          // mismatched close
  EXPECT_EQ(accepted_prefix(R"({"a":1}})"), 7u);           // a close past the root
  EXPECT_FALSE(completes(R"({"a":1)"));
  EXPECT_FALSE(completes(R"({"a":"open)"));
}

TEST(JsonMatcher, ARefusedByteLeavesTheStateAsItWas) {
  JsonMatcher m;
  ASSERT_TRUE(m.feed(std::string(R"({"n":12)")));
  EXPECT_FALSE(m.feed(static_cast<uint8_t>('x')));
  EXPECT_FALSE(m.feed(static_cast<uint8_t>(']')));
  EXPECT_TRUE(m.feed(std::string("3}")));  // the number goes on as if nothing had been tried
  EXPECT_TRUE(m.complete());
}

TEST(JsonMatcher, BoundsWhitespaceRunsAndNesting) {
  const std::string indent(WhitespaceRun::kMaxIndent, ' ');
  EXPECT_TRUE(completes("{\n" + indent + "}"));
  EXPECT_EQ(accepted_prefix("{\n" + indent + " }"), 2u + WhitespaceRun::kMaxIndent);
  // Without a line break, one space (no tab).
  EXPECT_TRUE(completes("{ \"a\": 1, \"b\": [1, 2] }"));
  EXPECT_EQ(accepted_prefix("{  }"), 2u);
  EXPECT_EQ(accepted_prefix("{\t}"), 1u);
  // Two line breaks (LF or CRLF), then the indentation; not a third, not a break after a space.
  EXPECT_TRUE(completes("{\n\n" + indent + "\"a\":\r\n\r\n\t1}"));
  EXPECT_EQ(accepted_prefix("{\n\n\n}"), 3u);
  EXPECT_EQ(accepted_prefix("{\r\n\r\n\r\n}"), 5u);
  EXPECT_EQ(accepted_prefix("{ \n}"), 2u);
  EXPECT_EQ(accepted_prefix("{\r }"), 2u);  // a carriage return only before a line feed
  // The run starts again after every token.
  EXPECT_TRUE(completes("{\n\n  \"a\"\n\n  :\n\n  1\n\n}"));
  std::string deep = "{\"a\":";
  for (int i = 1; i < JsonMatcher::kMaxDepth; ++i) deep += "[";
  EXPECT_EQ(accepted_prefix(deep + "["), deep.size());  // one level too many
  std::string closing(JsonMatcher::kMaxDepth - 1, ']');
  EXPECT_TRUE(completes(deep + closing + "}"));
}

TEST(JsonMatcher, BoundsTheDigitsOfEachPartOfANumber) {
  const std::string digits(JsonMatcher::kMaxDigits, '7');
  EXPECT_TRUE(completes("{\"n\": -" + digits + "." + digits + "e+" + digits + "}"));
  EXPECT_EQ(accepted_prefix("{\"n\": " + digits + "7}"), 6u + JsonMatcher::kMaxDigits);
  EXPECT_EQ(accepted_prefix("{\"n\": 0." + digits + "7}"), 8u + JsonMatcher::kMaxDigits);
  EXPECT_EQ(accepted_prefix("{\"n\": 1E" + digits + "7}"), 8u + JsonMatcher::kMaxDigits);
  // Each part counts its own digits; the next number starts from none.
  EXPECT_TRUE(completes("[" + digits + ", " + digits + "]", /*object_root=*/false));
}

TEST(JsonMatcher, WithoutAnObjectRootAnyContainerOrLiteralIsADocument) {
  EXPECT_TRUE(completes("[1, {\"a\": []}]", /*object_root=*/false));
  EXPECT_TRUE(completes("\"text\"", false));
  EXPECT_TRUE(completes("null", false));
}

}  // namespace
}  // namespace mnemo::grammar

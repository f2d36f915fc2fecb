// SchemaMatcherSet on exact inputs: anyOf at the root, inside an object and per array item;
// each document one alternative allows is accepted, each byte no alternative allows is refused
// where it is written, and the set narrows to the alternatives still possible.
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "grammar/schema_matcher_set.h"
#include "grammar/schema_test_util.h"

namespace mnemo::grammar {
namespace {

using nlohmann::json;

constexpr auto accepted_prefix = &accepted_prefix_with<SchemaMatcherSet>;
constexpr auto completes = &completes_with<SchemaMatcherSet>;

// A tool-call envelope: calls of two tools with different arguments, or a plain response.
const json kEnvelope = json::parse(R"({"anyOf": [
  {"type": "object", "required": ["tool_calls"], "properties": {"tool_calls": {"type": "array", "minItems": 1,
    "items": {"anyOf": [
      {"type": "object", "required": ["name", "arguments"], "properties": {"name": {"const": "weather"},
        "arguments": {"type": "object", "required": ["city"], "properties": {"city": {"type": "string"}}}}},
      {"type": "object", "required": ["name", "arguments"], "properties": {"name": {"const": "add"},
        "arguments": {"type": "object", "required": ["a", "b"], "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}}}
    ]}}}},
  {"type": "object", "required": ["response"], "properties": {"response": {"type": "string"}}}
]})");

TEST(SchemaMatcherSet, FollowsEveryAlternativeOfAnEnvelope) {
  const CompiledSchema s = compiled(kEnvelope);
  ASSERT_TRUE(s.has_any_of);
  EXPECT_TRUE(completes(s, R"({"response":"hi"})"));
  EXPECT_TRUE(completes(s, R"({"tool_calls":[{"name":"weather","arguments":{"city":"Oslo"}}]})"));
  // Items choose their alternative each, in any key order.
  EXPECT_TRUE(completes(s, R"({"tool_calls":[{"arguments":{"a":1,"b":2},"name":"add"},{"name":"weather","arguments":{"city":""}}]})"));
  // Arguments of one tool under another's name: refused at the byte that mismatches.
  EXPECT_EQ(accepted_prefix(s, R"({"tool_calls":[{"name":"add","arguments":{"city")"), 43u);
  EXPECT_EQ(accepted_prefix(s, R"({"tool_calls":[{"arguments":{"a":1,"b":2},"name":"w)"), 50u);
  EXPECT_EQ(accepted_prefix(s, R"({"tool_calls":[]})"), 15u);     // minItems 1
  EXPECT_EQ(accepted_prefix(s, R"({"response":"x","tool_calls")"), 15u);  // one alternative at a time
  EXPECT_FALSE(completes(s, R"({"tool_calls":[{"name":"add","arguments":{"a":1}}]})"));  // "b" is required
}

TEST(SchemaMatcherSet, NarrowsToTheAlternativesStillPossible) {
  const CompiledSchema s = compiled(kEnvelope);
  SchemaMatcherSet m(&s);
  EXPECT_EQ(m.live(), 2);
  ASSERT_TRUE(m.feed(R"({"tool_calls":[)"));
  EXPECT_EQ(m.live(), 2);  // the two tools
  ASSERT_TRUE(m.feed(R"({"name":"we)"));
  EXPECT_EQ(m.live(), 1);
  ASSERT_TRUE(m.feed(R"(ather","arguments":{"city":"x"}}])"));
  EXPECT_EQ(m.live(), 1);
  ASSERT_TRUE(m.feed("}"));
  EXPECT_TRUE(m.complete());
  EXPECT_FALSE(m.feed(" x"));
}

TEST(SchemaMatcherSet, AnyOfOfScalarsInsideAnObject) {
  const CompiledSchema s = compiled(json::parse(R"({"type":"object","required":["v"],"properties":{
      "v":{"anyOf":[{"type":"integer"},{"type":"string"},{"type":"null"},{"type":"array","items":{"type":"boolean"}}]}}})"));
  for (const char* ok : {R"({"v":12})", R"({"v":"12"})", R"({"v":null})", R"({"v":[true,false]})", R"({"v":[]})"}) {
    EXPECT_TRUE(completes(s, ok)) << ok;
  }
  EXPECT_EQ(accepted_prefix(s, R"({"v":1.5})"), 6u);
  EXPECT_EQ(accepted_prefix(s, R"({"v":[1])"), 6u);
  EXPECT_EQ(accepted_prefix(s, R"({"v":nul})"), 8u);
  EXPECT_EQ(accepted_prefix(s, R"({"v":true})"), 5u);  // no boolean but in the array
}

TEST(SchemaMatcherSet, AnyObjectTakesAnyObject) {
  CompiledSchema s;
  append_any_object(s);
  EXPECT_TRUE(completes(s, R"({"x":[1,{"y":null}],"z":"w"})"));
  EXPECT_TRUE(completes(s, "{}"));
  EXPECT_EQ(accepted_prefix(s, "[1]"), 0u);
  EXPECT_EQ(accepted_prefix(s, "{} {"), 2u);  // nothing after the document
}

TEST(SchemaMatcherSet, AppendedSchemasKeepTheirShape) {
  CompiledSchema into = compiled(json::parse(R"({"type":"object","properties":{"a":{"type":"integer"}}})"));
  const CompiledSchema part = compiled(kEnvelope);
  const int32_t root = append_schema(into, part);
  EXPECT_EQ(root, 2);
  EXPECT_TRUE(into.has_any_of);
  // The appended root as the root: the same language as the part.
  into.nodes[0] = into.nodes[static_cast<size_t>(root)];
  EXPECT_TRUE(completes(into, R"({"tool_calls":[{"name":"add","arguments":{"a":1,"b":2}}]})"));
  EXPECT_FALSE(completes(into, R"({"a":1})"));
}

}  // namespace
}  // namespace mnemo::grammar

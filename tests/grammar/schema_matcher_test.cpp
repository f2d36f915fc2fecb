// compile_schema and SchemaMatcher on exact inputs: the subset compiles and anything else is
// refused by name; documents the schema allows are accepted byte by byte and complete, and each
// violation is refused at the byte that commits it.
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "grammar/schema_matcher.h"
#include "grammar/schema_matcher_set.h"
#include "grammar/schema_test_util.h"

namespace mnemo::grammar {
namespace {

using nlohmann::json;

const json kPerson = json::parse(R"({
  "type": "object",
  "properties": {
    "name": {"type": "string", "description": "given name"},
    "age": {"type": "integer"},
    "height": {"type": "number"},
    "pet": {"enum": ["cat", "dog", null]},
    "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 2},
    "alive": {"type": "boolean"},
    "address": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
                "additionalProperties": false}
  },
  "required": ["name", "age", "tags", "address"],
  "additionalProperties": false
})");

constexpr auto accepted_prefix = &accepted_prefix_with<SchemaMatcher>;
constexpr auto completes = &completes_with<SchemaMatcher>;

TEST(CompileSchema, RefusesWhatItDoesNotImplementByName) {
  for (const auto& [schema, keyword] : std::vector<std::pair<json, std::string>>{
           {{{"anyOf", json::array()}}, "'anyOf'"},
           {{{"anyOf", json::array({{{"type", "string"}}})}, {"type", "string"}}, "'type'"},
           {{{"type", "number"}, {"minimum", 1}}, "minimum"},
           {{{"type", "string"}, {"format", "hostname"}}, "hostname"},
           {{{"type", "string"}, {"pattern", "(?=a)"}}, "lookaround"},
           {{{"type", "string"}, {"minLength", 3}, {"maxLength", 2}}, "minLength"},
           {{{"type", "object"}, {"additionalProperties", true}}, "additionalProperties"},
           {{{"type", "array"}}, "items"},
           {{{"enum", {1, 2}}}, "enum values"},
           {{{"type", json::array({"string", "null"})}}, "'type'"},
           {{{"type", "object"}, {"required", {"x"}}}, "required"},
       }) {
    const auto c = compile_schema(schema);
    ASSERT_FALSE(c.ok()) << schema.dump();
    EXPECT_NE(c.error().message().find(keyword), std::string::npos) << c.error().message();
  }
  json deep = {{"type", "string"}};
  for (int i = 0; i < 20; ++i) deep = {{"type", "array"}, {"items", deep}};
  EXPECT_FALSE(compile_schema(deep).ok());
}

TEST(CompileSchema, RefsToDefinitionsAreFollowedAsPydanticWritesThem) {
  // What pydantic makes of a model with a nested model used twice, an enum and an optional field.
  const json schema = json::parse(R"({
    "$defs": {
      "Point": {"properties": {"x": {"title": "X", "type": "integer"}, "y": {"title": "Y", "type": "integer"}},
                "required": ["x", "y"], "title": "Point", "type": "object", "additionalProperties": false},
      "Colour": {"enum": ["red", "green"], "title": "Colour", "type": "string"}
    },
    "properties": {"start": {"$ref": "#/$defs/Point"}, "end": {"$ref": "#/$defs/Point"},
                   "colour": {"$ref": "#/$defs/Colour"},
                   "label": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": null, "title": "Label"}},
    "required": ["start", "end", "colour"], "title": "Segment", "type": "object", "additionalProperties": false})");
  const CompiledSchema c = compiled(schema);
  EXPECT_LE(c.nodes.size(), 10u) << "Point compiled once, shared by both references";
  EXPECT_TRUE(completes_with<SchemaMatcherSet>(c, R"({"start": {"x": 1, "y": -2}, "end": {"x": 3, "y": 4}, "colour": "red"})"));
  EXPECT_TRUE(completes_with<SchemaMatcherSet>(c, R"({"colour": "green", "end": {"y": 0, "x": 0}, "start": {"x": 5, "y": 6}, "label": null})"));
  EXPECT_FALSE(completes_with<SchemaMatcherSet>(c, R"({"start": {"x": 1}, "end": {"x": 3, "y": 4}, "colour": "red"})"));
  EXPECT_FALSE(completes_with<SchemaMatcherSet>(c, R"({"start": {"x": 1, "y": 2}, "end": {"x": 3, "y": 4}, "colour": "blue"})"));
  // "definitions" (older pydantic) and a pointer with an escaped '/'.
  EXPECT_TRUE(completes_with<SchemaMatcher>(compiled(json::parse(R"({"definitions": {"a/b": {"type": "boolean"}},
      "type": "object", "properties": {"f": {"$ref": "#/definitions/a~1b"}}, "required": ["f"]})")), R"({"f": true})"));
  for (const auto& [bad, words] : std::vector<std::pair<std::string, std::string>>{
           {R"({"$defs": {"Node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/Node"}}}},
                "$ref": "#/$defs/Node"})", "recursive"},
           {R"({"$defs": {"A": {"$ref": "#/$defs/B"}, "B": {"$ref": "#/$defs/A"}}, "$ref": "#/$defs/A"})", "recursive"},
           {R"({"type": "object", "properties": {"a": {"$ref": "#/$defs/Missing"}}})", "points at nothing"},
           {R"({"type": "object", "properties": {"a": {"$ref": "https://example.com/schema"}}})", "into this schema"},
           {R"({"type": "object", "properties": {"a": {"$ref": "#/$defs/X", "type": "string"}}, "$defs": {"X": {"type": "null"}}})", "'type'"},
       }) {
    const auto c2 = compile_schema(json::parse(bad));
    ASSERT_FALSE(c2.ok()) << bad;
    EXPECT_NE(c2.error().message().find(words), std::string::npos) << c2.error().message();
  }
}

TEST(SchemaMatcher, IntegerBoundsHoldDigitByDigit) {
  const CompiledSchema c = compiled(json::parse(R"({"type": "object", "properties": {
      "age": {"type": "integer", "minimum": 18, "maximum": 120},
      "delta": {"type": "integer", "exclusiveMinimum": -10, "exclusiveMaximum": 10},
      "count": {"anyOf": [{"type": "integer", "minimum": 1000}, {"type": "null"}]}},
      "required": ["age", "delta"], "additionalProperties": false})"));
  EXPECT_TRUE(completes_with<SchemaMatcherSet>(c, R"({"age": 18, "delta": -9})"));
  EXPECT_TRUE(completes_with<SchemaMatcherSet>(c, R"({"delta": 9, "age": 120, "count": 123456})"));
  EXPECT_TRUE(completes_with<SchemaMatcherSet>(c, R"({"age": 77, "delta": 0, "count": null})"));
  // Refused at the first byte no number in range can have: "2" of 200 is fine (20..99 may
  // follow), its second "0" is not (200 > 120); "1" of 17 is (18, 100..120), its "7" is not;
  // 2 is refused at the byte after it, which ends it below 18.
  const std::string over = R"({"age": 200, "delta": 0})";
  EXPECT_EQ(accepted_prefix_with<SchemaMatcherSet>(c, over), over.find("200") + 2);
  const std::string under = R"({"age": 17, "delta": 0})";
  EXPECT_EQ(accepted_prefix_with<SchemaMatcherSet>(c, under), under.find("17") + 1);
  const std::string small = R"({"age": 2, "delta": 0})";
  EXPECT_EQ(accepted_prefix_with<SchemaMatcherSet>(c, small), small.find("2,") + 1);
  EXPECT_FALSE(completes_with<SchemaMatcherSet>(c, R"({"age": 30, "delta": 10})"));
  EXPECT_FALSE(completes_with<SchemaMatcherSet>(c, R"({"age": 30, "delta": -10})"));
  EXPECT_FALSE(completes_with<SchemaMatcherSet>(c, R"({"age": 30, "delta": 1, "count": 999})"));
  EXPECT_FALSE(completes_with<SchemaMatcherSet>(c, R"({"age": 18.5, "delta": 1})"));
  // Fractional bounds round inwards; a number's bounds and bounds past 10^15 are refused.
  const CompiledSchema fractional = compiled(json::parse(R"({"type": "integer", "minimum": 1.5, "maximum": 3.5})"));
  EXPECT_EQ(fractional.regexes.size(), 1u);
  EXPECT_TRUE(fractional.regexes[0].matches("2") && fractional.regexes[0].matches("3"));
  EXPECT_FALSE(fractional.regexes[0].matches("1") || fractional.regexes[0].matches("4"));
  EXPECT_FALSE(compile_schema(json::parse(R"({"type": "number", "minimum": 0})")).ok());
  EXPECT_FALSE(compile_schema(json::parse(R"({"type": "integer", "maximum": 1e18})")).ok());
  EXPECT_FALSE(compile_schema(json::parse(R"({"type": "integer", "minimum": 5, "maximum": 4})")).ok());
}

TEST(SchemaMatcher, AcceptsWhatTheSchemaAllows) {
  const CompiledSchema s = compiled(kPerson);
  EXPECT_TRUE(completes(s, R"({"name":"Ann","age":31,"tags":["a"],"address":{"city":"Oslo"}})"));
  EXPECT_TRUE(completes(s, "{ \"name\" : \"Bo \\\"B\\\"\", \"age\" : -2, \"height\" : 1.8e0, \"pet\" : null,\n"
                           "  \"tags\" : [ \"x\" , \"y\" ], \"alive\" : true, \"address\" : { \"city\" : \"\" } }"));
  EXPECT_TRUE(completes(s, R"({"name":"C","age":0,"pet":"dog","tags":["t"],"alive":false,"address":{"city":"R"}})"));
}

TEST(SchemaMatcher, RefusesEachViolationAtItsByte) {
  const CompiledSchema s = compiled(kPerson);
  EXPECT_EQ(accepted_prefix(s, R"({"name":1)"), 8u);                            // a string expected
  EXPECT_EQ(accepted_prefix(s, R"({"name":"A","age":1.5)"), 19u);              // an integer: no fraction
  EXPECT_EQ(accepted_prefix(s, R"({"name":"A","age":1,"pet":"cow")"), 28u);    // not one of the enum
  EXPECT_EQ(accepted_prefix(s, R"({"name":"A","age":1,"extra":1)"), 21u);      // no such key
  EXPECT_EQ(accepted_prefix(s, R"({"name":"A","age":1,"name":"B")"), 21u);     // a key twice
  EXPECT_EQ(accepted_prefix(s, R"({"name":"A","age":1,"tags":[])"), 28u);      // minItems 1
  EXPECT_EQ(accepted_prefix(s, R"({"name":"A","age":1,"tags":["a","b",)"), 35u);  // maxItems 2
  EXPECT_EQ(accepted_prefix(s, R"({"name":"A","age":1,"tags":["a"]})"), 32u);  // required "address" missing
  // Any order: the schema's object is unordered, as JSON's are.
  EXPECT_TRUE(completes(s, R"({"address":{"city":"B"},"tags":["a"],"age":1,"name":"A"})"));
}

TEST(SchemaMatcher, OptionalPropertiesMayBeLeftOut) {
  const CompiledSchema s = compiled(json::parse(R"({"type":"object","properties":{
      "a":{"type":"boolean"},"b":{"type":"null"},"c":{"type":"integer"}},"required":["c"]})"));
  EXPECT_TRUE(completes(s, R"({"c":1})"));
  EXPECT_TRUE(completes(s, R"({"b":null,"c":1})"));
  EXPECT_TRUE(completes(s, R"({"c":12,"a":true,"b":null})"));
  EXPECT_EQ(accepted_prefix(s, R"({"a":true})"), 9u);  // "c" is required
  EXPECT_EQ(accepted_prefix(s, R"({"c":1,"a":true,"b":null,)"), 24u);  // nothing left to write
  const CompiledSchema empty = compiled(json::parse(R"({"type":"object","properties":{}})"));
  EXPECT_TRUE(completes(empty, "{}"));
  EXPECT_EQ(accepted_prefix(empty, R"({")"), 1u);
}

TEST(SchemaMatcher, StringLengthsCountCharacters) {
  const CompiledSchema s = compiled(json::parse(R"({"type":"object","properties":{
      "code":{"type":"string","minLength":2,"maxLength":3}},"required":["code"]})"));
  EXPECT_TRUE(completes(s, R"({"code":"ab"})"));
  EXPECT_TRUE(completes(s, R"({"code":"\u00e9\n\""})"));  // three characters, each an escape
  EXPECT_TRUE(completes(s, "{\"code\":\"\xc3\xa9\xc3\xa9\xc3\xa9\"}"));  // three 2-byte characters
  EXPECT_EQ(accepted_prefix(s, R"({"code":"a")"), 10u);      // one is too short
  EXPECT_EQ(accepted_prefix(s, R"({"code":"abcd")"), 12u);   // four is too long
}

TEST(SchemaMatcher, PatternsAndFormatsShapeTheString) {
  const CompiledSchema s = compiled(json::parse(R"({"type":"object","properties":{
      "day":{"type":"string","format":"date"},"sku":{"type":"string","pattern":"^[A-Z]{2}-\\d+$"},
      "note":{"type":"string","pattern":"ok"}},"required":["day","sku"]})"));
  EXPECT_TRUE(completes(s, R"({"day":"2026-12-02","sku":"AB-12"})"));
  EXPECT_TRUE(completes(s, R"({"day":"2026-12-02","sku":"AB-1","note":"it is ok!"})"));  // unanchored: contains "ok"
  EXPECT_EQ(accepted_prefix(s, R"({"day":"2026-13)"), 14u);   // no month 13
  EXPECT_EQ(accepted_prefix(s, R"({"day":"2026-12-0")"), 17u);  // the date is not whole
  EXPECT_EQ(accepted_prefix(s, R"({"sku":"Ab)"), 9u);
  EXPECT_EQ(accepted_prefix(s, R"({"sku":"AB-\)"), 11u);       // no escapes in a patterned string
  EXPECT_EQ(accepted_prefix(s, R"({"day":"2026-12-02","sku":"AB-1","note":"no")"), 43u);  // no "ok" in it
  SchemaMatcher m(&s);
  ASSERT_TRUE(m.feed(R"({"note":"x)"));
  EXPECT_FALSE(m.in_string());  // a patterned string: every token is tried
}

}  // namespace
}  // namespace mnemo::grammar

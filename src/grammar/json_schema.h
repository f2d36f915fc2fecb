// A JSON Schema compiled for constrained decoding (response_format json_schema): the subset
// structured outputs use, each node one of
//   object   properties (in any order, each once; one not in `required` may be left out; at
//            most 64), no other keys (additionalProperties is false, as OpenAI's strict mode has it);
//   array    items, minItems, maxItems;
//   string   minLength, maxLength (characters), pattern (grammar/regex.h), format (date, time,
//            date-time, email, uuid, ipv4, uri);
//   integer  minimum, maximum, exclusiveMinimum, exclusiveMaximum (within ±10^15: followed as a
//            pattern over its digits, grammar/integer_range.h); number, boolean, null;
//   enum     of strings, booleans or null (also `const`);
//   anyOf    of at most 16 alternatives (grammar/schema_matcher_set.h follows them all at once);
//   any object (only where a caller asks for it: a tool's parameters that do not compile);
//   $ref     to a definition in the schema ($defs, definitions: pydantic's nested models),
//            compiled once and shared; a recursive one is refused.
// Anything else (a number's bounds, type lists, ...) is refused with the keyword named, never
// silently ignored.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "grammar/regex.h"
#include "util/result.h"

namespace mnemo::grammar {

struct SchemaNode {
  enum class Kind : uint8_t { kObject, kArray, kString, kInteger, kNumber, kBoolean, kNull, kEnum, kAnyOf, kAnyObject };
  struct Property {
    std::string key;  // as written in the output: JSON-quoted
    int32_t node = 0;
    bool required = true;
  };
  Kind kind = Kind::kObject;
  std::vector<Property> properties;  // object
  int32_t items = -1;                // array: the items' node
  int32_t min_items = 0;
  int32_t max_items = INT32_MAX;
  std::vector<std::string> literals;  // enum: each value as written (JSON)
  std::vector<int32_t> alternatives;  // anyOf: the alternatives' nodes
  int32_t min_length = 0;             // string: characters (code points; an escape is one)
  int32_t max_length = INT32_MAX;
  int32_t regex = -1;                 // string: its pattern or format; integer: its bounds (CompiledSchema::regexes)
};

struct CompiledSchema {
  std::vector<SchemaNode> nodes;  // nodes[0] is the root
  bool has_any_of = false;        // then only a SchemaMatcherSet follows it
  std::vector<Regex> regexes;     // patterns and formats of string nodes
};

inline constexpr size_t kMaxAnyOf = 16;

// Bounded: at most 1024 nodes, nesting at most 16.
Result<CompiledSchema> compile_schema(const nlohmann::json& schema);

// Builds a schema from parts compiled apart: `add` appends a compiled schema's nodes (its root
// then at the returned index); `any_object` appends a node allowing any JSON object. Used to
// assemble a tool-call envelope around each tool's parameters.
int32_t append_schema(CompiledSchema& into, const CompiledSchema& part);
int32_t append_any_object(CompiledSchema& into);

}  // namespace mnemo::grammar

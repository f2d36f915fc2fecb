// A JSON Schema compiled for constrained decoding (response_format json_schema): the subset
// structured outputs use, each node one of
//   object   properties (in any order, each once; one not in `required` may be left out; at
//            most 64), no other keys (additionalProperties is false, as OpenAI's strict mode has it);
//   array    items, minItems, maxItems;
//   string, integer, number, boolean, null;
//   enum     of strings, booleans or null (also `const`).
// Anything else (anyOf, $ref, patterns, formats, lengths of strings, type lists) is refused with
// the keyword named, never silently ignored.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "util/result.h"

namespace mnemo::grammar {

struct SchemaNode {
  enum class Kind : uint8_t { kObject, kArray, kString, kInteger, kNumber, kBoolean, kNull, kEnum };
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
};

struct CompiledSchema {
  std::vector<SchemaNode> nodes;  // nodes[0] is the root
};

// Bounded: at most 1024 nodes, nesting at most 16.
Result<CompiledSchema> compile_schema(const nlohmann::json& schema);

}  // namespace mnemo::grammar

#include "grammar/json_schema.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>

#include <fmt/format.h>

#include "grammar/integer_range.h"

namespace mnemo::grammar {
namespace {

using nlohmann::json;

constexpr size_t kMaxNodes = 1024;
constexpr int kMaxNesting = 16;

// Keywords that describe without constraining, accepted anywhere (definitions are read where a
// $ref points into them).
bool descriptive(const std::string& key) {
  return key == "description" || key == "title" || key == "$schema" || key == "examples" || key == "default" ||
         key == "$comment" || key == "$defs" || key == "definitions" || key == "$id";
}

class Compiler {
 public:
  explicit Compiler(const json& root) : root_(root) {}

  Result<int32_t> node(const json& schema, int depth, const std::string& where) {
    if (depth > kMaxNesting) return make_error("{}: the schema nests deeper than {} levels", where, kMaxNesting);
    if (out_.nodes.size() >= kMaxNodes) return make_error("the schema has more than {} nodes", kMaxNodes);
    if (!schema.is_object()) return make_error("{}: a schema must be an object", where);
    if (schema.contains("$ref")) return reference(schema, depth, where);
    const auto index = static_cast<int32_t>(out_.nodes.size());
    out_.nodes.emplace_back();
    if (schema.contains("enum") || schema.contains("const")) return literal(schema, index, where);
    if (schema.contains("anyOf")) return any_of(schema, index, depth, where);
    const auto type = schema.find("type");
    if (type == schema.end() || !type->is_string()) {
      return make_error("{}: 'type' must be one of object, array, string, integer, number, boolean, null", where);
    }
    const std::string& name = type->get_ref<const std::string&>();
    if (name == "object") return object(schema, index, depth, where);
    if (name == "array") return array(schema, index, depth, where);
    if (name == "string") return string(schema, index, where);
    static const std::pair<const char*, SchemaNode::Kind> kScalars[] = {{"number", SchemaNode::Kind::kNumber},
        {"boolean", SchemaNode::Kind::kBoolean}, {"null", SchemaNode::Kind::kNull}};
    if (name == "integer") return integer(schema, index, where);
    for (const auto& [scalar, kind] : kScalars) {
      if (name != scalar) continue;
      MNEMO_RETURN_IF_ERROR(only_keywords(schema, {"type"}, where));
      out_.nodes[static_cast<size_t>(index)].kind = kind;
      return index;
    }
    return make_error("{}: type '{}' is not one of object, array, string, integer, number, boolean, null", where, name);
  }

  CompiledSchema take() { return std::move(out_); }

 private:
  // A "$ref" to a definition of this schema ("#/$defs/Name", "#/definitions/Name" or any JSON
  // pointer into it), as pydantic writes nested models: compiled once, its node shared by every
  // reference. A definition that refers to itself, directly or not, is refused: the output would
  // need a recursive grammar (the GBNF `grammar` extension can express one).
  Result<int32_t> reference(const json& schema, int depth, const std::string& where) {
    MNEMO_RETURN_IF_ERROR(only_keywords(schema, {"$ref"}, where));
    const json& ref = schema["$ref"];
    if (!ref.is_string() || ref.get_ref<const std::string&>().rfind("#", 0) != 0) {
      return make_error("{}: '$ref' must point into this schema (\"#/$defs/...\")", where);
    }
    const std::string& target = ref.get_ref<const std::string&>();
    if (const auto done = compiled_refs_.find(target); done != compiled_refs_.end()) return done->second;
    if (std::find(open_refs_.begin(), open_refs_.end(), target) != open_refs_.end()) {
      return make_error("{}: '$ref' {} is recursive; recursive schemas are not supported here", where, target);
    }
    const json* definition = nullptr;
    try {
      definition = &root_.at(json::json_pointer(target.substr(1)));
    } catch (const json::exception&) {
      return make_error("{}: '$ref' {} points at nothing in the schema", where, target);
    }
    open_refs_.push_back(target);
    auto compiled = node(*definition, depth + 1, target);
    open_refs_.pop_back();
    if (!compiled.ok()) return compiled.error();
    compiled_refs_.emplace(target, *compiled);
    return *compiled;
  }

  Status only_keywords(const json& schema, std::initializer_list<const char*> allowed, const std::string& where) const {
    for (const auto& item : schema.items()) {
      const std::string& key = item.key();
      const bool listed = std::find_if(allowed.begin(), allowed.end(), [&key](const char* a) { return key == a; }) != allowed.end();
      if (descriptive(key) || listed) continue;
      return make_error("{}: the keyword '{}' is not supported in structured outputs here", where, key);
    }
    return ok_status();
  }

  Result<int32_t> literal(const json& schema, int32_t index, const std::string& where) {
    MNEMO_RETURN_IF_ERROR(only_keywords(schema, {"enum", "const", "type"}, where));
    const json values = schema.contains("const") ? json::array({schema["const"]}) : schema["enum"];
    if (!values.is_array() || values.empty()) return make_error("{}: 'enum' must be a non-empty array", where);
    SchemaNode& n = out_.nodes[static_cast<size_t>(index)];
    n.kind = SchemaNode::Kind::kEnum;
    for (const json& v : values) {
      // Strings end with their quote and the literals true/false/null with a letter no other
      // begins with: no value is a prefix of another. Numbers would be (1, 10).
      if (!v.is_string() && !v.is_boolean() && !v.is_null()) {
        return make_error("{}: enum values must be strings, booleans or null", where);
      }
      n.literals.push_back(v.dump());
    }
    return index;
  }

  Result<int32_t> string(const json& schema, int32_t index, const std::string& where) {
    MNEMO_RETURN_IF_ERROR(only_keywords(schema, {"type", "minLength", "maxLength", "pattern", "format"}, where));
    SchemaNode& n = out_.nodes[static_cast<size_t>(index)];
    n.kind = SchemaNode::Kind::kString;
    MNEMO_ASSIGN_OR_RETURN(n.min_length, count(schema, "minLength", 0, where));
    MNEMO_ASSIGN_OR_RETURN(n.max_length, count(schema, "maxLength", INT32_MAX, where));
    if (n.min_length > n.max_length) return make_error("{}: 'minLength' is above 'maxLength'", where);
    if (schema.contains("pattern") && schema.contains("format")) return make_error("{}: 'pattern' and 'format' together are not supported", where);
    if (schema.contains("pattern") || schema.contains("format")) {
      const bool pattern = schema.contains("pattern");
      const json& value = schema[pattern ? "pattern" : "format"];
      if (!value.is_string()) return make_error("{}: '{}' must be a string", where, pattern ? "pattern" : "format");
      auto regex = pattern ? Regex::compile(value.get<std::string>(), /*anchored=*/false) : Regex::format(value.get<std::string>());
      if (!regex.ok()) return make_error("{}: {}", where, regex.error().message());
      out_.regexes.push_back(std::move(*regex));
      out_.nodes[static_cast<size_t>(index)].regex = static_cast<int32_t>(out_.regexes.size() - 1);
    }
    return index;
  }

  // An integer, with its bounds as a pattern over its digits (grammar/integer_range.h).
  Result<int32_t> integer(const json& schema, int32_t index, const std::string& where) {
    MNEMO_RETURN_IF_ERROR(only_keywords(schema, {"type", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}, where));
    out_.nodes[static_cast<size_t>(index)].kind = SchemaNode::Kind::kInteger;
    std::optional<int64_t> lo, hi;
    for (const char* key : {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"}) {
      if (!schema.contains(key)) continue;
      const json& v = schema[key];
      if (!v.is_number() || !std::isfinite(v.get<double>()) || std::abs(v.get<double>()) > 1e15) {
        return make_error("{}: '{}' must be a number within ±10^15", where, key);
      }
      const double x = v.get<double>();
      const std::string_view k = key;
      if (k == "minimum" || k == "exclusiveMinimum") {
        const auto bound = static_cast<int64_t>(k == "minimum" ? std::ceil(x) : std::floor(x) + 1);
        lo = lo ? std::max(*lo, bound) : bound;
      } else {
        const auto bound = static_cast<int64_t>(k == "maximum" ? std::floor(x) : std::ceil(x) - 1);
        hi = hi ? std::min(*hi, bound) : bound;
      }
    }
    if (!lo && !hi) return index;
    auto pattern = integer_range_pattern(lo, hi);
    if (!pattern.ok()) return make_error("{}: {}", where, pattern.error().message());
    auto regex = Regex::compile(*pattern, /*anchored=*/true);
    if (!regex.ok()) return make_error("{}: the integer bounds are too wide to follow here ({})", where, regex.error().message());
    out_.regexes.push_back(std::move(*regex));
    out_.nodes[static_cast<size_t>(index)].regex = static_cast<int32_t>(out_.regexes.size() - 1);
    return index;
  }

  Result<int32_t> count(const json& schema, const char* key, int32_t fallback, const std::string& where) const {
    if (!schema.contains(key)) return fallback;
    const json& v = schema[key];
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > (1 << 20)) {
      return make_error("{}: '{}' must be an integer from 0 to {}", where, key, 1 << 20);
    }
    return static_cast<int32_t>(v.get<int64_t>());
  }

  Result<int32_t> any_of(const json& schema, int32_t index, int depth, const std::string& where) {
    MNEMO_RETURN_IF_ERROR(only_keywords(schema, {"anyOf"}, where));
    const json& alternatives = schema["anyOf"];
    if (!alternatives.is_array() || alternatives.empty() || alternatives.size() > kMaxAnyOf) {
      return make_error("{}: 'anyOf' must be an array of 1 to {} schemas", where, kMaxAnyOf);
    }
    std::vector<int32_t> nodes;
    for (size_t i = 0; i < alternatives.size(); ++i) {
      MNEMO_ASSIGN_OR_RETURN(int32_t child, node(alternatives[i], depth + 1, fmt::format("{}.anyOf[{}]", where, i)));
      nodes.push_back(child);
    }
    out_.nodes[static_cast<size_t>(index)].kind = SchemaNode::Kind::kAnyOf;
    out_.nodes[static_cast<size_t>(index)].alternatives = std::move(nodes);
    out_.has_any_of = true;
    return index;
  }

  Result<int32_t> object(const json& schema, int32_t index, int depth, const std::string& where) {
    MNEMO_RETURN_IF_ERROR(only_keywords(schema, {"type", "properties", "required", "additionalProperties"}, where));
    if (schema.contains("additionalProperties") && schema["additionalProperties"] != false) {
      return make_error("{}: 'additionalProperties' must be false (strict structured outputs)", where);
    }
    const json properties = schema.value("properties", json::object());
    const json required = schema.value("required", json::array());
    if (!properties.is_object() || !required.is_array()) return make_error("{}: 'properties' must be an object, 'required' an array", where);
    if (properties.size() > 64) return make_error("{}: an object may have at most 64 properties here", where);
    std::vector<SchemaNode::Property> out;
    for (const auto& [key, sub] : properties.items()) {
      MNEMO_ASSIGN_OR_RETURN(int32_t child, node(sub, depth + 1, where + "." + key));
      const bool is_required = std::find(required.begin(), required.end(), json(key)) != required.end();
      out.push_back({json(key).dump(), child, is_required});
    }
    for (const json& r : required) {
      if (!r.is_string() || !properties.contains(r.get<std::string>())) {
        return make_error("{}: required property {} is not among 'properties'", where, r.dump());
      }
    }
    out_.nodes[static_cast<size_t>(index)].properties = std::move(out);
    out_.nodes[static_cast<size_t>(index)].kind = SchemaNode::Kind::kObject;
    return index;
  }

  Result<int32_t> array(const json& schema, int32_t index, int depth, const std::string& where) {
    MNEMO_RETURN_IF_ERROR(only_keywords(schema, {"type", "items", "minItems", "maxItems"}, where));
    MNEMO_ASSIGN_OR_RETURN(int32_t min_items, count(schema, "minItems", 0, where));
    MNEMO_ASSIGN_OR_RETURN(int32_t max_items, count(schema, "maxItems", INT32_MAX, where));
    if (min_items > max_items) return make_error("{}: 'minItems' is above 'maxItems'", where);
    if (!schema.contains("items")) return make_error("{}: an array needs 'items'", where);
    MNEMO_ASSIGN_OR_RETURN(int32_t items, node(schema["items"], depth + 1, where + "[]"));
    SchemaNode& n = out_.nodes[static_cast<size_t>(index)];
    n.kind = SchemaNode::Kind::kArray;
    n.items = items;
    n.min_items = min_items;
    n.max_items = max_items;
    return index;
  }

  const json& root_;
  CompiledSchema out_;
  std::map<std::string, int32_t> compiled_refs_;
  std::vector<std::string> open_refs_;  // the references being compiled, outermost first
};

}  // namespace

int32_t append_schema(CompiledSchema& into, const CompiledSchema& part) {
  const auto offset = static_cast<int32_t>(into.nodes.size());
  const auto regex_offset = static_cast<int32_t>(into.regexes.size());
  into.regexes.insert(into.regexes.end(), part.regexes.begin(), part.regexes.end());
  for (SchemaNode node : part.nodes) {
    for (SchemaNode::Property& p : node.properties) p.node += offset;
    for (int32_t& a : node.alternatives) a += offset;
    if (node.items >= 0) node.items += offset;
    if (node.regex >= 0) node.regex += regex_offset;
    into.nodes.push_back(std::move(node));
  }
  into.has_any_of = into.has_any_of || part.has_any_of;
  return offset;
}

int32_t append_any_object(CompiledSchema& into) {
  into.nodes.emplace_back();
  into.nodes.back().kind = SchemaNode::Kind::kAnyObject;
  return static_cast<int32_t>(into.nodes.size() - 1);
}

Result<CompiledSchema> compile_schema(const json& schema) {
  Compiler compiler(schema);
  MNEMO_ASSIGN_OR_RETURN(int32_t root, compiler.node(schema, 0, "schema"));
  (void)root;
  return compiler.take();
}

}  // namespace mnemo::grammar

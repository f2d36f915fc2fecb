// Values of the Jinja subset that chat templates use. Templates are written against Jinja2
// running in Python (HuggingFace's apply_chat_template), so truthiness, equality, ordering, str()
// and repr() follow Python: True == 1, [1] == [1.0], str(None) == "None", str(1.0) == "1.0".
//
// Strings, lists and dicts are immutable and shared (copying a Value copies a pointer), as in
// HF's ImmutableSandboxedEnvironment, which forbids list.append and friends. The one mutable
// object is the namespace(), whose attributes `{% set ns.x = ... %}` changes in place.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "util/result.h"

namespace mnemo::jinja {

class Value;
using List = std::vector<Value>;
// Insertion-ordered like a Python dict. Keys are strings (chat templates index by name; the
// evaluator stores an integer key of a dict literal as its digits).
using Dict = std::vector<std::pair<std::string, Value>>;

// The order matches Value's storage variant, so that kind() is the variant's index.
enum class Kind : uint8_t { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kNamespace };

class Value {
 public:
  Value() = default;  // undefined: a missing variable, key or attribute
  static Value none();
  static Value from_bool(bool value);
  static Value from_int(int64_t value);
  static Value from_float(double value);
  static Value from_string(std::string value);
  static Value from_list(List items);
  static Value from_dict(Dict entries);  // later duplicates replace earlier keys
  // For builders whose keys are distinct by construction (loop objects): skips the check.
  static Value from_distinct_keys(Dict entries);
  static Value new_namespace(Dict attributes);

  Kind kind() const { return static_cast<Kind>(storage_.index()); }
  bool is_undefined() const { return kind() == Kind::kUndefined; }
  bool is_none() const { return kind() == Kind::kNone; }
  bool is_string() const { return kind() == Kind::kString; }
  bool is_list() const { return kind() == Kind::kList; }
  bool is_dict() const { return kind() == Kind::kDict; }
  bool is_namespace() const { return kind() == Kind::kNamespace; }
  // Python numbers: bool is an int subclass, so True + 1 == 2.
  bool is_number() const { return kind() == Kind::kBool || kind() == Kind::kInt || kind() == Kind::kFloat; }
  bool is_integer() const { return kind() == Kind::kBool || kind() == Kind::kInt; }

  bool bool_value() const { return std::get<bool>(storage_); }
  int64_t int_value() const;  // bool or int
  double number_value() const;  // bool, int or float
  const std::string& string_value() const { return *std::get<kStringIndex>(storage_); }
  const List& list_value() const { return *std::get<kListIndex>(storage_); }
  // Entries of a dict or attributes of a namespace.
  const Dict& dict_value() const;
  // Only namespaces are mutable; the evaluator sets their attributes.
  Dict& namespace_attributes() const { return *std::get<kNamespaceIndex>(storage_); }

  // How deeply lists and dicts nest inside this value (0 for scalars); the evaluator bounds it
  // so that recursive printing, comparison and destruction cannot exhaust the stack.
  uint32_t nesting() const { return nesting_; }
  // About how many elements a deep walk (==, <, in, str, tojson) visits: 1 per scalar, plus one
  // per 16 bytes of a string, summed over containers (saturating). Walks are charged this much
  // to the work budget, so that comparing big values in a loop cannot run for hours.
  uint64_t weight() const;
  // Whether a namespace is inside (or is) this value: namespaces may not hold one, since that
  // could close a reference cycle (ns.me = [ns]).
  bool holds_namespace() const { return holds_namespace_; }

 private:
  // A list or dict value with its nesting, weight and namespace flag computed from its items.
  template <typename Items>
  static Value holding(Items items);
  static constexpr size_t kStringIndex = 5;
  static constexpr size_t kListIndex = 6;
  static constexpr size_t kNamespaceIndex = 8;
  using Storage = std::variant<std::monostate, std::nullptr_t, bool, int64_t, double,
                               std::shared_ptr<const std::string>, std::shared_ptr<const List>,
                               std::shared_ptr<const Dict>, std::shared_ptr<Dict>>;
  Storage storage_;
  uint32_t nesting_ = 0;
  uint64_t weight_ = 1;  // namespaces compute theirs when asked: their attributes change
  bool holds_namespace_ = false;
};

// The entry of `key` in a dict or namespace, or nullptr.
const Value* find_entry(const Dict& dict, std::string_view key);

// Python's bool(): empty strings and containers, zero, None and undefined are false.
bool truthy(const Value& value);
// Python's str() appended to `out`; undefined prints as nothing, as in Jinja.
void append_str(const Value& value, std::string* out);
std::string to_str(const Value& value);
// Python's repr(), used for strings inside printed lists and dicts.
std::string repr(const Value& value);
// Python's ==.
bool equals(const Value& lhs, const Value& rhs);
// Python's ordering (<0, 0, >0); an Error for unorderable pairs (str and int, dicts, None).
Result<int> compare(const Value& lhs, const Value& rhs);
// Python's type names, for error messages: "str", "int", "list", "dict", "NoneType", ...
std::string_view type_name(const Value& value);

// json.dumps as HF's tojson filter calls it: ensure_ascii=False; without an indent the
// separators are ", " and ": ", with one "," and ": ". Undefined and namespaces are errors.
struct JsonStyle {
  int indent = -1;  // < 0: one line
  bool sort_keys = false;
  std::string item_separator;  // empty: the default for the indent
  std::string key_separator;
};
Result<std::string> to_json(const Value& value, const JsonStyle& style);

}  // namespace mnemo::jinja

// Shared pieces of the builtins (arguments, iteration, len), Jinja's tests and the global
// functions. Filters live in jinja_filters.cpp, str and dict methods in jinja_methods.cpp.
#include "chat/jinja_builtins.h"

#include <algorithm>
#include <ctime>

#include <fmt/format.h>

#include "chat/jinja_operators.h"
#include "chat/jinja_text.h"

namespace mnemo::jinja {

namespace {

constexpr std::string_view kTests[] = {
    "defined", "undefined", "none", "boolean", "true", "false", "integer", "float", "number", "string",
    "mapping", "iterable", "sequence", "callable", "eq", "equalto", "==", "ne", "!=", "lt", "<", "le",
    "<=", "gt", ">", "ge", ">=", "in", "sameas", "odd", "even", "divisibleby", "lower", "upper"};

constexpr std::string_view kGlobals[] = {"range", "namespace", "dict", "raise_exception", "strftime_now"};

Result<Value> range(const Arguments& args, Budget& budget) {
  MNEMO_RETURN_IF_ERROR(args.check(3, {}, "range"));
  for (const Value& arg : args.positional) {
    if (!arg.is_integer()) return make_error("range() arguments must be integers, not '{}'", type_name(arg));
  }
  int64_t start = 0;
  int64_t stop = 0;
  int64_t step = 1;
  switch (args.positional.size()) {
    case 1: stop = args.positional[0].int_value(); break;
    case 2:
    case 3:
      start = args.positional[0].int_value();
      stop = args.positional[1].int_value();
      if (args.positional.size() == 3) step = args.positional[2].int_value();
      break;
    default: return make_error("range() takes 1 to 3 arguments");
  }
  if (step == 0) return make_error("range() step must not be zero");
  // Count in unsigned arithmetic: stop - start may not fit in an int64.
  uint64_t count = 0;
  if (step > 0 && start < stop) {
    count = (static_cast<uint64_t>(stop) - static_cast<uint64_t>(start) - 1) / static_cast<uint64_t>(step) + 1;
  } else if (step < 0 && start > stop) {
    const uint64_t magnitude = static_cast<uint64_t>(-(step + 1)) + 1;
    count = (static_cast<uint64_t>(start) - static_cast<uint64_t>(stop) - 1) / magnitude + 1;
  }
  MNEMO_RETURN_IF_ERROR(budget.allocate_items(count));
  List items;
  items.reserve(static_cast<size_t>(count));
  for (uint64_t k = 0; k < count; ++k) {
    items.push_back(Value::from_int(static_cast<int64_t>(static_cast<uint64_t>(start) + k * static_cast<uint64_t>(step))));
  }
  return Value::from_list(std::move(items));
}

// HF's strftime_now(format): the local time now, formatted (templates print today's date).
Result<Value> strftime_now(const Arguments& args) {
  MNEMO_RETURN_IF_ERROR(args.check(1, {"format"}, "strftime_now"));
  const Value format = args.get(0, "format");
  if (!format.is_string()) return make_error("strftime_now() needs a format string");
  if (format.string_value().size() > 256) return make_error("strftime_now() format is too long");
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char text[1024];
  // The format is the template's by design; strftime only writes within `text`.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
  const size_t size = std::strftime(text, sizeof(text), format.string_value().c_str(), &local);
#pragma GCC diagnostic pop
  return Value::from_string(std::string(text, size));
}

// dict(mapping, **kwargs) and namespace(mapping, **kwargs).
Result<Dict> build_dict(const Arguments& args, std::string_view callee) {
  if (args.positional.size() > 1) return make_error("{}() takes at most 1 positional argument", callee);
  Dict entries;
  if (!args.positional.empty()) {
    const Value& mapping = args.positional[0];
    if (!mapping.is_dict()) return make_error("{}() needs a mapping, not '{}'", callee, type_name(mapping));
    entries = mapping.dict_value();
  }
  for (const auto& [key, value] : args.keyword) entries.emplace_back(key, value);
  return entries;
}

bool all_cased(const std::string& text, bool upper) {
  bool any_cased = false;
  for (const char c : text) {
    if (c >= 'a' && c <= 'z') {
      if (upper) return false;
      any_cased = true;
    } else if (c >= 'A' && c <= 'Z') {
      if (!upper) return false;
      any_cased = true;
    }
  }
  return any_cased;
}

}  // namespace

Value Arguments::get(size_t index, std::string_view name) const {
  if (index < positional.size()) return positional[index];
  for (const auto& [key, value] : keyword) {
    if (key == name) return value;
  }
  return Value();
}

Value Arguments::named(std::string_view name) const {
  for (const auto& [key, value] : keyword) {
    if (key == name) return value;
  }
  return Value();
}

Status Arguments::check(size_t count, std::initializer_list<std::string_view> names, std::string_view callee) const {
  if (positional.size() > count) {
    return make_error("{}() takes at most {} positional argument{} ({} given)", callee, count, count == 1 ? "" : "s",
                      positional.size());
  }
  for (const auto& [key, value] : keyword) {
    if (std::find(names.begin(), names.end(), key) == names.end()) {
      return make_error("{}() got an unexpected keyword argument '{}'", callee, key);
    }
  }
  return ok_status();
}

bool is_known_test(std::string_view name) { return std::find(std::begin(kTests), std::end(kTests), name) != std::end(kTests); }

bool is_global_function(std::string_view name) {
  return std::find(std::begin(kGlobals), std::end(kGlobals), name) != std::end(kGlobals);
}

Result<bool> apply_test(std::string_view name, const Value& subject, const Arguments& args, Budget& budget) {
  const Kind kind = subject.kind();
  if (name == "defined") return !subject.is_undefined();
  if (name == "undefined") return subject.is_undefined();
  if (name == "none") return subject.is_none();
  if (name == "boolean") return kind == Kind::kBool;
  if (name == "true") return kind == Kind::kBool && subject.bool_value();
  if (name == "false") return kind == Kind::kBool && !subject.bool_value();
  if (name == "integer") return kind == Kind::kInt;
  if (name == "float") return kind == Kind::kFloat;
  if (name == "number") return subject.is_number();
  if (name == "string") return subject.is_string();
  if (name == "mapping") return subject.is_dict();
  // Jinja's Undefined iterates as empty, so it counts as iterable.
  if (name == "iterable") return subject.is_string() || subject.is_list() || subject.is_dict() || subject.is_undefined();
  if (name == "sequence") return subject.is_string() || subject.is_list() || subject.is_dict();
  if (name == "callable") return false;
  if (name == "lower" || name == "upper") return subject.is_string() && all_cased(subject.string_value(), name == "upper");

  const Value other = args.get(0, "value");
  MNEMO_RETURN_IF_ERROR(budget.step(std::min(subject.weight(), other.weight())));
  if (name == "eq" || name == "equalto" || name == "==") return equals(subject, other);
  if (name == "ne" || name == "!=") return !equals(subject, other);
  if (name == "sameas") return subject.kind() == other.kind() && equals(subject, other);
  if (name == "in") {
    MNEMO_RETURN_IF_ERROR(budget.step(other.weight()));
    return contains(other, subject);
  }
  if (name == "lt" || name == "<" || name == "le" || name == "<=" || name == "gt" || name == ">" || name == "ge" ||
      name == ">=") {
    MNEMO_ASSIGN_OR_RETURN(const int order, compare(subject, other));
    if (name == "lt" || name == "<") return order < 0;
    if (name == "le" || name == "<=") return order <= 0;
    if (name == "gt" || name == ">") return order > 0;
    return order >= 0;
  }
  if (name == "odd" || name == "even" || name == "divisibleby") {
    if (!subject.is_integer()) return make_error("test '{}' needs an integer, not '{}'", name, type_name(subject));
    const int64_t divisor = name == "divisibleby" ? (other.is_integer() ? other.int_value() : 0) : 2;
    if (divisor == 0) return make_error("test 'divisibleby' needs a non-zero integer argument");
    const bool divisible = divisor == -1 || subject.int_value() % divisor == 0;
    return name == "odd" ? !divisible : divisible;
  }
  return make_error("unknown test '{}'", name);
}

std::optional<Result<Value>> call_global(std::string_view name, const Arguments& args, Budget& budget) {
  if (name == "range") return range(args, budget);
  if (name == "dict" || name == "namespace") {
    Result<Dict> entries = build_dict(args, name);
    if (!entries.ok()) return Result<Value>(entries.error());
    if (name == "dict") return Result<Value>(Value::from_dict(std::move(*entries)));
    return Result<Value>(Value::new_namespace(std::move(*entries)));
  }
  if (name == "strftime_now") return strftime_now(args);
  if (name == "raise_exception") {
    // The template's own message, for the client: "Conversation roles must alternate ...".
    return Result<Value>(make_error("{}", to_str(args.get(0, "message"))));
  }
  return std::nullopt;
}

Result<std::string> str_within_budget(const Value& value, Budget& budget) {
  if (!value.is_string()) MNEMO_RETURN_IF_ERROR(budget.allocate_items(value.weight()));
  std::string text = to_str(value);
  MNEMO_RETURN_IF_ERROR(budget.allocate(text.size()));
  return text;
}

Result<List> iterate(const Value& value, Budget& budget) {
  switch (value.kind()) {
    case Kind::kUndefined: return List{};
    case Kind::kList: return value.list_value();
    case Kind::kString: {
      const std::string& text = value.string_value();
      const std::vector<size_t> offsets = char_offsets(text);
      MNEMO_RETURN_IF_ERROR(budget.allocate_items(offsets.size() - 1));
      List characters;
      characters.reserve(offsets.size() - 1);
      for (size_t k = 0; k + 1 < offsets.size(); ++k) {
        characters.push_back(Value::from_string(text.substr(offsets[k], offsets[k + 1] - offsets[k])));
      }
      return characters;
    }
    case Kind::kDict:
    case Kind::kNamespace: {
      List keys;
      keys.reserve(value.dict_value().size());
      for (const auto& entry : value.dict_value()) keys.push_back(Value::from_string(entry.first));
      return keys;
    }
    default: return make_error("'{}' object is not iterable", type_name(value));
  }
}

Result<int64_t> length(const Value& value) {
  switch (value.kind()) {
    case Kind::kUndefined: return 0;
    case Kind::kString: return static_cast<int64_t>(char_count(value.string_value()));
    case Kind::kList: return static_cast<int64_t>(value.list_value().size());
    case Kind::kDict:
    case Kind::kNamespace: return static_cast<int64_t>(value.dict_value().size());
    default: return make_error("object of type '{}' has no len()", type_name(value));
  }
}

}  // namespace mnemo::jinja

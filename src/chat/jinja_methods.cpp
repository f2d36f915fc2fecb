// Python's str and dict methods that chat templates call: message.content.strip(),
// role.startswith('a'), tool.get('name'), tool.items(), '{} and {}'.format(a, b), ...
#include <algorithm>

#include <fmt/format.h>

#include "chat/jinja_builtins.h"
#include "chat/jinja_operators.h"
#include "chat/jinja_text.h"

namespace mnemo::jinja {

namespace {

Result<Value> string_result(std::string text, Budget& budget) {
  MNEMO_RETURN_IF_ERROR(budget.allocate(text.size()));
  return Value::from_string(std::move(text));
}

Result<Value> list_of_strings(std::vector<std::string> parts, Budget& budget) {
  MNEMO_RETURN_IF_ERROR(budget.allocate_items(parts.size()));
  List items;
  items.reserve(parts.size());
  for (std::string& part : parts) items.push_back(Value::from_string(std::move(part)));
  return Value::from_list(std::move(items));
}

Result<std::optional<std::string_view>> optional_string(const Value& value, std::string_view what) {
  if (value.is_undefined() || value.is_none()) return std::optional<std::string_view>();
  if (!value.is_string()) return make_error("{} must be a string or None, not '{}'", what, type_name(value));
  return std::optional<std::string_view>(value.string_value());
}

// startswith/endswith take one string or a tuple of them.
Result<bool> matches_affix(const std::string& text, const Value& affixes, bool at_start) {
  const auto matches = [&](const Value& affix) -> Result<bool> {
    if (!affix.is_string()) return make_error("startswith/endswith need strings, not '{}'", type_name(affix));
    const std::string& a = affix.string_value();
    if (a.size() > text.size()) return false;
    return at_start ? text.compare(0, a.size(), a) == 0 : text.compare(text.size() - a.size(), a.size(), a) == 0;
  };
  if (!affixes.is_list()) return matches(affixes);
  for (const Value& affix : affixes.list_value()) {
    MNEMO_ASSIGN_OR_RETURN(const bool found, matches(affix));
    if (found) return true;
  }
  return false;
}

// str.format with {} / {0} / {name} fields and {{ }} escapes; format specs are not supported.
Result<Value> format(const std::string& pattern, const Arguments& args, Budget& budget) {
  std::string text;
  size_t next_auto_index = 0;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if ((c == '{' || c == '}') && i + 1 < pattern.size() && pattern[i + 1] == c) {
      text.push_back(c);
      ++i;
      continue;
    }
    if (c == '}') return make_error("format(): single '}}' in the format string");
    if (c != '{') {
      text.push_back(c);
      continue;
    }
    const size_t close = pattern.find('}', i);
    if (close == std::string::npos) return make_error("format(): unclosed '{{' in the format string");
    const std::string field = pattern.substr(i + 1, close - i - 1);
    if (field.find_first_of(":!{") != std::string::npos) return make_error("format(): format specs are not supported");
    Value argument;
    if (field.empty()) {
      argument = args.get(next_auto_index++, "");
    } else if (std::all_of(field.begin(), field.end(), [](char d) { return d >= '0' && d <= '9'; })) {
      argument = field.size() < 9 ? args.get(std::stoul(field), "") : Value();
    } else {
      argument = args.named(field);
    }
    if (argument.is_undefined()) return make_error("format(): no argument for field '{{{}}}'", field);
    MNEMO_RETURN_IF_ERROR(budget.allocate_items(argument.weight()));
    append_str(argument, &text);
    MNEMO_RETURN_IF_ERROR(budget.allocate(text.size()));
    i = close;
  }
  return string_result(std::move(text), budget);
}

bool all_chars(const std::string& text, bool (*predicate)(char)) {
  return !text.empty() && std::all_of(text.begin(), text.end(), predicate);
}

Result<Value> string_method(const std::string& text, std::string_view name, const Arguments& args, Budget& budget) {
  MNEMO_RETURN_IF_ERROR(budget.step(1 + text.size() / 16));
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    MNEMO_RETURN_IF_ERROR(args.check(1, {"chars"}, name));
    MNEMO_ASSIGN_OR_RETURN(const auto chars, optional_string(args.get(0, "chars"), "strip() chars"));
    return string_result(std::string(strip(text, chars, name != "rstrip", name != "lstrip")), budget);
  }
  if (name == "split") {
    MNEMO_RETURN_IF_ERROR(args.check(2, {"sep", "maxsplit"}, name));
    MNEMO_ASSIGN_OR_RETURN(const auto separator, optional_string(args.get(0, "sep"), "split() separator"));
    if (separator && separator->empty()) return make_error("split(): empty separator");
    const Value max_splits = args.get(1, "maxsplit");
    return list_of_strings(split(text, separator, max_splits.is_integer() ? max_splits.int_value() : -1), budget);
  }
  if (name == "splitlines") {
    MNEMO_RETURN_IF_ERROR(args.check(0, {}, name));
    return list_of_strings(split_lines(text), budget);
  }
  if (name == "startswith" || name == "endswith") {
    MNEMO_RETURN_IF_ERROR(args.check(1, {}, name));
    MNEMO_ASSIGN_OR_RETURN(const bool found, matches_affix(text, args.get(0, ""), name == "startswith"));
    return Value::from_bool(found);
  }
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
    MNEMO_RETURN_IF_ERROR(args.check(0, {}, name));
    if (name == "upper") return string_result(to_upper(text), budget);
    if (name == "lower") return string_result(to_lower(text), budget);
    if (name == "title") return string_result(title_case(text), budget);
    return string_result(capitalize(text), budget);
  }
  if (name == "replace") {
    MNEMO_RETURN_IF_ERROR(args.check(3, {}, name));
    const Value old_text = args.get(0, "");
    const Value new_text = args.get(1, "");
    if (!old_text.is_string() || !new_text.is_string()) return make_error("replace() needs two strings");
    const Value count = args.get(2, "");
    const int64_t limit = count.is_integer() ? count.int_value() : -1;
    const size_t replacements = count_replacements(text, old_text.string_value(), limit);
    if (replacements > 0 && new_text.string_value().size() > budget.limits().max_value_bytes / replacements) {
      return make_error("replace() would build a string over the value size limit");
    }
    MNEMO_RETURN_IF_ERROR(budget.allocate(text.size() + replacements * new_text.string_value().size()));
    return Value::from_string(replace(text, old_text.string_value(), new_text.string_value(), limit));
  }
  if (name == "find" || name == "rfind" || name == "count") {
    MNEMO_RETURN_IF_ERROR(args.check(1, {}, name));
    const Value needle = args.get(0, "");
    if (!needle.is_string()) return make_error("{}() needs a string, not '{}'", name, type_name(needle));
    const std::string& sub = needle.string_value();
    if (name == "count") return Value::from_int(static_cast<int64_t>(count_replacements(text, sub, -1)));
    const size_t at = name == "find" ? text.find(sub) : text.rfind(sub);
    if (at == std::string::npos) return Value::from_int(-1);
    return Value::from_int(static_cast<int64_t>(char_count(std::string_view(text).substr(0, at))));
  }
  if (name == "format") return format(text, args, budget);
  if (name == "join") {
    MNEMO_RETURN_IF_ERROR(args.check(1, {}, name));
    MNEMO_ASSIGN_OR_RETURN(const List items, iterate(args.get(0, ""), budget));
    std::string joined;
    for (size_t i = 0; i < items.size(); ++i) {
      if (!items[i].is_string()) return make_error("join(): item {} is '{}', not a string", i, type_name(items[i]));
      if (i > 0) joined += text;
      joined += items[i].string_value();
      MNEMO_RETURN_IF_ERROR(budget.allocate(joined.size()));
    }
    return Value::from_string(std::move(joined));
  }
  if (name == "isdigit") return Value::from_bool(all_chars(text, [](char c) { return c >= '0' && c <= '9'; }));
  if (name == "isalpha") {
    return Value::from_bool(all_chars(text, [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }));
  }
  if (name == "isspace") {
    return Value::from_bool(!text.empty() && strip(text, std::nullopt, true, true).empty());
  }
  return make_error("'str' object has no method '{}'", name);
}

Result<Value> dict_method(const Value& dict, std::string_view name, const Arguments& args, Budget& budget) {
  const Dict& entries = dict.dict_value();
  MNEMO_RETURN_IF_ERROR(budget.step(1 + entries.size()));
  if (name == "get") {
    MNEMO_RETURN_IF_ERROR(args.check(2, {}, name));
    const Value found = get_item(dict, args.get(0, ""));
    if (!found.is_undefined()) return found;
    const Value fallback = args.get(1, "");
    return fallback.is_undefined() ? Value::none() : fallback;
  }
  if (name == "items" || name == "keys" || name == "values") {
    MNEMO_RETURN_IF_ERROR(args.check(0, {}, name));
    MNEMO_RETURN_IF_ERROR(budget.allocate_items(entries.size()));
    List items;
    items.reserve(entries.size());
    for (const auto& [key, value] : entries) {
      if (name == "items") items.push_back(Value::from_list({Value::from_string(key), value}));
      else if (name == "keys") items.push_back(Value::from_string(key));
      else items.push_back(value);
    }
    return Value::from_list(std::move(items));
  }
  return make_error("'dict' object has no method '{}'", name);
}

}  // namespace

Result<Value> call_method(const Value& object, std::string_view name, const Arguments& args, Budget& budget) {
  if (object.is_string()) return string_method(object.string_value(), name, args, budget);
  if (object.is_dict()) return dict_method(object, name, args, budget);
  return make_error("'{}' object has no method '{}'", type_name(object), name);
}

}  // namespace mnemo::jinja

// Jinja's filters, as chat templates use them. Where HF overrides one (tojson), HF's behaviour
// is the one followed.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>

#include <fmt/format.h>

#include "chat/jinja_builtins.h"
#include "chat/jinja_operators.h"
#include "chat/jinja_text.h"

namespace mnemo::jinja {

namespace {

using FilterFunction = Result<Value> (*)(const Value& subject, const Arguments& args, Budget& budget);

Result<Value> string_result(std::string text, Budget& budget) {
  MNEMO_RETURN_IF_ERROR(budget.allocate(text.size()));
  return Value::from_string(std::move(text));
}

Result<Value> list_result(List items, Budget& budget) {
  MNEMO_RETURN_IF_ERROR(budget.allocate_items(items.size()));
  return Value::from_list(std::move(items));
}

// An attribute path "a.b.c" or an integer index, as selectattr, map and sort take them.
Value lookup_path(const Value& item, const Value& path) {
  if (path.is_integer()) return get_item(item, path);
  Value current = item;
  for (const std::string& part : split(to_str(path), std::string_view("."), -1)) {
    current = current.is_dict() || current.is_namespace() ? get_attribute(current, part) : Value();
  }
  return current;
}

std::optional<std::string_view> optional_chars(const Value& chars) {
  if (chars.is_string()) return std::string_view(chars.string_value());
  return std::nullopt;
}

Result<Value> trim(const Value& subject, const Arguments& args, Budget& budget) {
  MNEMO_RETURN_IF_ERROR(args.check(1, {"chars"}, "trim"));
  const Value chars = args.get(0, "chars");
  return string_result(std::string(strip(to_str(subject), optional_chars(chars), true, true)), budget);
}

Result<Value> upper(const Value& subject, const Arguments& args, Budget& budget) {
  MNEMO_RETURN_IF_ERROR(args.check(0, {}, "upper"));
  return string_result(to_upper(to_str(subject)), budget);
}

Result<Value> lower(const Value& subject, const Arguments& args, Budget& budget) {
  MNEMO_RETURN_IF_ERROR(args.check(0, {}, "lower"));
  return string_result(to_lower(to_str(subject)), budget);
}

Result<Value> capitalize_filter(const Value& subject, const Arguments& args, Budget& budget) {
  MNEMO_RETURN_IF_ERROR(args.check(0, {}, "capitalize"));
  return string_result(capitalize(to_str(subject)), budget);
}

Result<Value> title(const Value& subject, const Arguments& args, Budget& budget) {
  MNEMO_RETURN_IF_ERROR(args.check(0, {}, "title"));
  return string_result(title_case(to_str(subject)), budget);
}

Result<Value> length_filter(const Value& subject, const Arguments& args, Budget&) {
  MNEMO_RETURN_IF_ERROR(args.check(0, {}, "length"));
  MNEMO_ASSIGN_OR_RETURN(const int64_t size, length(subject));
  return Value::from_int(size);
}

Result<Value> string_filter(const Value& subject, const Arguments& args, Budget& budget) {
  MNEMO_RETURN_IF_ERROR(args.check(0, {}, "string"));
  if (subject.is_string()) return subject;
  return string_result(to_str(subject), budget);
}

Result<Value> safe(const Value& subject, const Arguments& args, Budget&) {
  MNEMO_RETURN_IF_ERROR(args.check(0, {}, "safe"));
  return subject;  // no autoescaping in chat templates, so nothing to mark
}

Result<Value> escape(const Value& subject, const Arguments& args, Budget& budget) {
  MNEMO_RETURN_IF_ERROR(args.check(0, {}, "escape"));
  std::string text;
  for (const char c : to_str(subject)) {
    switch (c) {
      case '&': text += "&amp;"; break;
      case '<': text += "&lt;"; break;
      case '>': text += "&gt;"; break;
      case '"': text += "&#34;"; break;
      case '\'': text += "&#39;"; break;
      default: text.push_back(c);
    }
  }
  return string_result(std::move(text), budget);
}

// HF's tojson: json.dumps(x, ensure_ascii=False, indent=..., separators=..., sort_keys=...).
Result<Value> tojson(const Value& subject, const Arguments& args, Budget& budget) {
  MNEMO_RETURN_IF_ERROR(args.check(0, {"indent", "sort_keys", "separators", "ensure_ascii"}, "tojson"));
  JsonStyle style;
  const Value indent = args.named("indent");
  if (indent.is_integer()) style.indent = static_cast<int>(std::clamp<int64_t>(indent.int_value(), 0, 16));
  else if (!indent.is_undefined() && !indent.is_none()) return make_error("tojson() indent must be an integer");
  style.sort_keys = truthy(args.named("sort_keys"));
  if (truthy(args.named("ensure_ascii"))) return make_error("tojson(ensure_ascii=true) is not supported");
  const Value separators = args.named("separators");
  if (separators.is_list() && separators.list_value().size() == 2 && separators.list_value()[0].is_string() &&
      separators.list_value()[1].is_string()) {
    style.item_separator = separators.list_value()[0].string_value();
    style.key_separator = separators.list_value()[1].string_value();
  } else if (!separators.is_undefined() && !separators.is_none()) {
    return make_error("tojson() separators must be a pair of strings");
  }
  MNEMO_ASSIGN_OR_RETURN(std::string json, to_json(subject, style));
  return string_result(std::move(json), budget);
}

Result<Value> default_filter(const Value& subject, const Arguments& args, Budget&) {
  MNEMO_RETURN_IF_ERROR(args.check(2, {"default_value", "boolean"}, "default"));
  const bool use_default = subject.is_undefined() || (truthy(args.get(1, "boolean")) && !truthy(subject));
  if (!use_default) return subject;
  const Value fallback = args.get(0, "default_value");
  return fallback.is_undefined() ? Value::from_string("") : fallback;
}

Result<Value> replace_filter(const Value& subject, const Arguments& args, Budget& budget) {
  MNEMO_RETURN_IF_ERROR(args.check(3, {"old", "new", "count"}, "replace"));
  const std::string text = to_str(subject);
  const std::string old_text = to_str(args.get(0, "old"));
  const std::string new_text = to_str(args.get(1, "new"));
  const Value count = args.get(2, "count");
  const int64_t limit = count.is_integer() ? count.int_value() : -1;
  const size_t replacements = count_replacements(text, old_text, limit);
  if (new_text.size() > old_text.size() && replacements > 0 &&
      new_text.size() - old_text.size() > budget.limits().max_value_bytes / replacements) {
    return make_error("replace() would build a string over the value size limit");
  }
  MNEMO_RETURN_IF_ERROR(budget.allocate(text.size() + replacements * new_text.size()));
  return Value::from_string(replace(text, old_text, new_text, limit));
}

Result<Value> join(const Value& subject, const Arguments& args, Budget& budget) {
  MNEMO_RETURN_IF_ERROR(args.check(2, {"d", "attribute"}, "join"));
  const Value separator = args.get(0, "d");
  const std::string glue = separator.is_undefined() ? "" : to_str(separator);
  const Value attribute = args.get(1, "attribute");
  MNEMO_ASSIGN_OR_RETURN(const List items, iterate(subject, budget));
  std::string text;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) text += glue;
    append_str(attribute.is_undefined() ? items[i] : lookup_path(items[i], attribute), &text);
    MNEMO_RETURN_IF_ERROR(budget.allocate(text.size()));
  }
  return Value::from_string(std::move(text));
}

Result<Value> list(const Value& subject, const Arguments& args, Budget& budget) {
  MNEMO_RETURN_IF_ERROR(args.check(0, {}, "list"));
  MNEMO_ASSIGN_OR_RETURN(List items, iterate(subject, budget));
  return list_result(std::move(items), budget);
}

Result<Value> first(const Value& subject, const Arguments& args, Budget& budget) {
  MNEMO_RETURN_IF_ERROR(args.check(0, {}, "first"));
  MNEMO_ASSIGN_OR_RETURN(const List items, iterate(subject, budget));
  return items.empty() ? Value() : items.front();
}

Result<Value> last(const Value& subject, const Arguments& args, Budget& budget) {
  MNEMO_RETURN_IF_ERROR(args.check(0, {}, "last"));
  MNEMO_ASSIGN_OR_RETURN(const List items, iterate(subject, budget));
  return items.empty() ? Value() : items.back();
}

Result<Value> reverse(const Value& subject, const Arguments& args, Budget& budget) {
  MNEMO_RETURN_IF_ERROR(args.check(0, {}, "reverse"));
  MNEMO_ASSIGN_OR_RETURN(List items, iterate(subject, budget));
  std::reverse(items.begin(), items.end());
  if (!subject.is_string()) return list_result(std::move(items), budget);
  std::string text;
  for (const Value& character : items) text += character.string_value();
  return Value::from_string(std::move(text));
}

// The sort key of sort, dictsort, unique, min and max: case-insensitive for strings by default.
Value sort_key(const Value& item, const Value& attribute, bool case_sensitive) {
  Value key = attribute.is_undefined() ? item : lookup_path(item, attribute);
  if (!case_sensitive && key.is_string()) key = Value::from_string(to_lower(key.string_value()));
  return key;
}

// Stable sort by `keys`; the first unorderable pair becomes the Error.
Status sort_by_keys(List* items, const List& keys, bool descending, Budget& budget) {
  std::vector<size_t> order(items->size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  // Each key takes part in about log2(n) comparisons.
  uint64_t key_weights = 0;
  for (const Value& key : keys) key_weights = std::min<uint64_t>(key_weights + key.weight(), UINT64_MAX / 64);
  uint64_t rounds = 1;
  while ((size_t{1} << rounds) < keys.size() && rounds < 63) ++rounds;
  MNEMO_RETURN_IF_ERROR(budget.step(key_weights * rounds));
  std::optional<Error> failure;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (failure) return false;
    Result<int> result = compare(keys[a], keys[b]);
    if (!result.ok()) {
      failure = result.error();
      return false;
    }
    return descending ? *result > 0 : *result < 0;
  });
  if (failure) return *failure;
  List sorted;
  sorted.reserve(order.size());
  for (const size_t i : order) sorted.push_back((*items)[i]);
  *items = std::move(sorted);
  return ok_status();
}

Result<Value> sort(const Value& subject, const Arguments& args, Budget& budget) {
  MNEMO_RETURN_IF_ERROR(args.check(3, {"reverse", "case_sensitive", "attribute"}, "sort"));
  MNEMO_ASSIGN_OR_RETURN(List items, iterate(subject, budget));
  const Value attribute = args.get(2, "attribute");
  const bool case_sensitive = truthy(args.get(1, "case_sensitive"));
  List keys;
  for (const Value& item : items) keys.push_back(sort_key(item, attribute, case_sensitive));
  MNEMO_RETURN_IF_ERROR(sort_by_keys(&items, keys, truthy(args.get(0, "reverse")), budget));
  return list_result(std::move(items), budget);
}

Result<Value> dictsort(const Value& subject, const Arguments& args, Budget& budget) {
  MNEMO_RETURN_IF_ERROR(args.check(3, {"case_sensitive", "by", "reverse"}, "dictsort"));
  if (!subject.is_dict()) return make_error("dictsort needs a dict, not '{}'", type_name(subject));
  const bool by_value = to_str(args.get(1, "by")) == "value";
  const bool case_sensitive = truthy(args.get(0, "case_sensitive"));
  List pairs;
  List keys;
  for (const auto& [key, value] : subject.dict_value()) {
    pairs.push_back(Value::from_list({Value::from_string(key), value}));
    keys.push_back(sort_key(by_value ? value : Value::from_string(key), Value(), case_sensitive));
  }
  MNEMO_RETURN_IF_ERROR(sort_by_keys(&pairs, keys, truthy(args.get(2, "reverse")), budget));
  return list_result(std::move(pairs), budget);
}

Result<Value> items(const Value& subject, const Arguments& args, Budget& budget) {
  MNEMO_RETURN_IF_ERROR(args.check(0, {}, "items"));
  if (subject.is_undefined()) return Value::from_list({});
  if (!subject.is_dict()) return make_error("items needs a dict, not '{}'", type_name(subject));
  List pairs;
  for (const auto& [key, value] : subject.dict_value()) pairs.push_back(Value::from_list({Value::from_string(key), value}));
  return list_result(std::move(pairs), budget);
}

Result<Value> unique(const Value& subject, const Arguments& args, Budget& budget) {
  MNEMO_RETURN_IF_ERROR(args.check(2, {"case_sensitive", "attribute"}, "unique"));
  MNEMO_ASSIGN_OR_RETURN(const List all, iterate(subject, budget));
  const Value attribute = args.get(1, "attribute");
  const bool case_sensitive = truthy(args.get(0, "case_sensitive"));
  List kept;
  List seen;
  for (const Value& item : all) {
    const Value key = sort_key(item, attribute, case_sensitive);
    bool duplicate = false;
    for (const Value& other : seen) {
      MNEMO_RETURN_IF_ERROR(budget.step(std::min(key.weight(), other.weight())));
      if (equals(key, other)) {
        duplicate = true;
        break;
      }
    }
    if (duplicate) continue;
    seen.push_back(key);
    kept.push_back(item);
  }
  return list_result(std::move(kept), budget);
}

Result<Value> extreme(const Value& subject, const Arguments& args, Budget& budget, bool want_max) {
  MNEMO_RETURN_IF_ERROR(args.check(2, {"case_sensitive", "attribute"}, want_max ? "max" : "min"));
  MNEMO_ASSIGN_OR_RETURN(const List all, iterate(subject, budget));
  const Value attribute = args.get(1, "attribute");
  const bool case_sensitive = truthy(args.get(0, "case_sensitive"));
  Value best;
  Value best_key;
  for (const Value& item : all) {
    const Value key = sort_key(item, attribute, case_sensitive);
    if (!best.is_undefined()) {
      MNEMO_ASSIGN_OR_RETURN(const int order, compare(key, best_key));
      if (want_max ? order <= 0 : order >= 0) continue;
    }
    best = item;
    best_key = key;
  }
  return best;
}

Result<Value> min(const Value& subject, const Arguments& args, Budget& budget) { return extreme(subject, args, budget, false); }
Result<Value> max(const Value& subject, const Arguments& args, Budget& budget) { return extreme(subject, args, budget, true); }

Result<Value> sum(const Value& subject, const Arguments& args, Budget& budget) {
  MNEMO_RETURN_IF_ERROR(args.check(2, {"attribute", "start"}, "sum"));
  MNEMO_ASSIGN_OR_RETURN(const List all, iterate(subject, budget));
  const Value attribute = args.get(0, "attribute");
  const Value start = args.get(1, "start");
  Value total = start.is_undefined() ? Value::from_int(0) : start;
  for (const Value& item : all) {
    MNEMO_ASSIGN_OR_RETURN(total, binary_operation(BinaryOp::kAdd, total, attribute.is_undefined() ? item : lookup_path(item, attribute), budget));
  }
  return total;
}

// select/reject(test, args...) and selectattr/rejectattr(attribute, test, args...).
Result<Value> filter_items(const Value& subject, const Arguments& args, Budget& budget, bool by_attribute, bool keep_matching) {
  if (!args.keyword.empty()) return make_error("select filters take no keyword arguments");
  if (!truthy(subject)) return Value::from_list({});  // Jinja skips a false subject (none)
  MNEMO_ASSIGN_OR_RETURN(const List all, iterate(subject, budget));
  const size_t test_index = by_attribute ? 1 : 0;
  if (by_attribute && args.positional.empty()) return make_error("selectattr/rejectattr need an attribute");
  Arguments test_args;
  std::string test_name;
  if (args.positional.size() > test_index) {
    test_name = to_str(args.positional[test_index]);
    if (!is_known_test(test_name)) return make_error("no test named '{}'", test_name);
    test_args.positional.assign(args.positional.begin() + static_cast<std::ptrdiff_t>(test_index) + 1, args.positional.end());
  }
  List kept;
  for (const Value& item : all) {
    const Value tested = by_attribute ? lookup_path(item, args.positional[0]) : item;
    bool passed = truthy(tested);
    if (!test_name.empty()) {
      MNEMO_ASSIGN_OR_RETURN(passed, apply_test(test_name, tested, test_args, budget));
    }
    if (passed == keep_matching) kept.push_back(item);
  }
  return list_result(std::move(kept), budget);
}

Result<Value> select(const Value& s, const Arguments& a, Budget& b) { return filter_items(s, a, b, false, true); }
Result<Value> reject(const Value& s, const Arguments& a, Budget& b) { return filter_items(s, a, b, false, false); }
Result<Value> selectattr(const Value& s, const Arguments& a, Budget& b) { return filter_items(s, a, b, true, true); }
Result<Value> rejectattr(const Value& s, const Arguments& a, Budget& b) { return filter_items(s, a, b, true, false); }

bool is_higher_order(std::string_view name) {
  return name == "map" || name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr";
}

// map(attribute='x', default=d) or map('filter', args...).
Result<Value> map(const Value& subject, const Arguments& args, Budget& budget) {
  if (!truthy(subject)) return Value::from_list({});  // Jinja skips a false subject (none)
  MNEMO_ASSIGN_OR_RETURN(const List all, iterate(subject, budget));
  List mapped;
  const Value attribute = args.named("attribute");
  if (!attribute.is_undefined()) {
    MNEMO_RETURN_IF_ERROR(args.check(0, {"attribute", "default"}, "map"));
    const Value fallback = args.named("default");
    for (const Value& item : all) {
      Value found = lookup_path(item, attribute);
      mapped.push_back(found.is_undefined() && !fallback.is_undefined() ? fallback : found);
    }
    return list_result(std::move(mapped), budget);
  }
  if (args.positional.empty()) return make_error("map() needs a filter name or attribute=");
  const std::string filter = to_str(args.positional[0]);
  // A higher-order filter inside map could nest without bound through its own arguments.
  if (!is_known_filter(filter) || is_higher_order(filter)) return make_error("map() cannot apply filter '{}'", filter);
  Arguments filter_args;
  filter_args.positional.assign(args.positional.begin() + 1, args.positional.end());
  filter_args.keyword = args.keyword;
  for (const Value& item : all) {
    MNEMO_ASSIGN_OR_RETURN(Value result, apply_filter(filter, item, filter_args, budget));
    mapped.push_back(std::move(result));
  }
  return list_result(std::move(mapped), budget);
}

// Jinja's indent: every line but the first (unless first=true) gets the prefix; blank lines
// only with blank=true.
Result<Value> indent(const Value& subject, const Arguments& args, Budget& budget) {
  MNEMO_RETURN_IF_ERROR(args.check(3, {"width", "first", "blank"}, "indent"));
  const Value width = args.get(0, "width");
  std::string prefix;
  if (width.is_string()) prefix = width.string_value();
  else prefix.assign(static_cast<size_t>(std::clamp<int64_t>(width.is_integer() ? width.int_value() : 4, 0, 256)), ' ');
  const bool indent_first = truthy(args.get(1, "first"));
  const bool indent_blank = truthy(args.get(2, "blank"));
  const std::vector<std::string> lines = split_lines(to_str(subject) + "\n");
  MNEMO_RETURN_IF_ERROR(budget.allocate_items(lines.size()));
  MNEMO_RETURN_IF_ERROR(budget.allocate(to_str(subject).size() + lines.size() * prefix.size()));
  std::string text;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) text.push_back('\n');
    const bool wants_prefix = (i > 0 || indent_first) && (indent_blank || !lines[i].empty() || i == 0);
    if (wants_prefix) text += prefix;
    text += lines[i];
  }
  return Value::from_string(std::move(text));
}

// A whole string (spaces around allowed) as a number, as Python's int() and float() read it.
std::optional<double> parse_float(std::string_view text) {
  text = strip(text, std::nullopt, true, true);
  if (!text.empty() && text.front() == '+') text.remove_prefix(1);
  double number = 0.0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), number);
  if (text.empty() || error != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return number;
}

std::optional<int64_t> parse_int(std::string_view text) {
  text = strip(text, std::nullopt, true, true);
  if (!text.empty() && text.front() == '+') text.remove_prefix(1);
  int64_t number = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), number);
  if (text.empty() || error != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return number;
}

// Jinja's int: ints and floats convert, strings are read as an int, then as a float.
Result<Value> int_filter(const Value& subject, const Arguments& args, Budget&) {
  MNEMO_RETURN_IF_ERROR(args.check(2, {"default", "base"}, "int"));
  const Value fallback = args.get(0, "default");
  const Value otherwise = fallback.is_undefined() ? Value::from_int(0) : fallback;
  if (subject.is_integer()) return Value::from_int(subject.int_value());
  std::optional<double> number;
  if (subject.kind() == Kind::kFloat) number = subject.number_value();
  if (subject.is_string()) {
    if (const std::optional<int64_t> integer = parse_int(subject.string_value())) return Value::from_int(*integer);
    number = parse_float(subject.string_value());
  }
  if (!number || !std::isfinite(*number) || std::fabs(*number) >= 9.2e18) return otherwise;
  return Value::from_int(static_cast<int64_t>(*number));
}

Result<Value> float_filter(const Value& subject, const Arguments& args, Budget&) {
  MNEMO_RETURN_IF_ERROR(args.check(1, {"default"}, "float"));
  const Value fallback = args.get(0, "default");
  if (subject.is_number()) return Value::from_float(subject.number_value());
  if (subject.is_string()) {
    if (const std::optional<double> number = parse_float(subject.string_value())) return Value::from_float(*number);
  }
  return fallback.is_undefined() ? Value::from_float(0.0) : fallback;
}

Result<Value> abs_filter(const Value& subject, const Arguments& args, Budget&) {
  MNEMO_RETURN_IF_ERROR(args.check(0, {}, "abs"));
  if (subject.is_integer()) {
    if (subject.int_value() == std::numeric_limits<int64_t>::min()) return make_error("integer overflow in abs");
    return Value::from_int(subject.int_value() < 0 ? -subject.int_value() : subject.int_value());
  }
  if (subject.is_number()) return Value::from_float(std::fabs(subject.number_value()));
  return make_error("bad operand type for abs(): '{}'", type_name(subject));
}

Result<Value> round_filter(const Value& subject, const Arguments& args, Budget&) {
  MNEMO_RETURN_IF_ERROR(args.check(2, {"precision", "method"}, "round"));
  if (!subject.is_number()) return make_error("round needs a number, not '{}'", type_name(subject));
  const Value precision = args.get(0, "precision");
  const double scale = std::pow(10.0, static_cast<double>(std::clamp<int64_t>(precision.is_integer() ? precision.int_value() : 0, -300, 300)));
  const std::string method = args.get(1, "method").is_undefined() ? "common" : to_str(args.get(1, "method"));
  const double scaled = subject.number_value() * scale;
  double rounded;
  if (method == "common") rounded = std::round(scaled);
  else if (method == "ceil") rounded = std::ceil(scaled);
  else if (method == "floor") rounded = std::floor(scaled);
  else return make_error("round method must be 'common', 'ceil' or 'floor'");
  return Value::from_float(rounded / scale);
}

Result<Value> attr(const Value& subject, const Arguments& args, Budget&) {
  MNEMO_RETURN_IF_ERROR(args.check(1, {"name"}, "attr"));
  return get_attribute(subject, to_str(args.get(0, "name")));
}

struct FilterEntry {
  std::string_view name;
  FilterFunction function;
  bool walks_subject;
};

// Whether a filter walks its subject deeply (prints, compares or searches it), so that the
// evaluator charges the walk first; the others only look at the top level.
constexpr bool kWalks = true;
constexpr bool kShallow = false;

constexpr FilterEntry kFilters[] = {
    {"trim", trim, kWalks}, {"upper", upper, kWalks}, {"lower", lower, kWalks},
    {"capitalize", capitalize_filter, kWalks}, {"title", title, kWalks}, {"length", length_filter, kShallow},
    {"count", length_filter, kShallow}, {"string", string_filter, kWalks}, {"safe", safe, kShallow},
    {"e", escape, kWalks}, {"escape", escape, kWalks}, {"tojson", tojson, kWalks},
    {"default", default_filter, kShallow}, {"d", default_filter, kShallow}, {"replace", replace_filter, kWalks},
    {"join", join, kWalks}, {"list", list, kShallow}, {"first", first, kShallow}, {"last", last, kShallow},
    {"reverse", reverse, kShallow}, {"sort", sort, kWalks}, {"dictsort", dictsort, kWalks},
    {"items", items, kShallow}, {"unique", unique, kWalks}, {"min", min, kWalks}, {"max", max, kWalks},
    {"sum", sum, kWalks}, {"select", select, kWalks}, {"reject", reject, kWalks},
    {"selectattr", selectattr, kWalks}, {"rejectattr", rejectattr, kWalks}, {"map", map, kWalks},
    {"indent", indent, kWalks}, {"int", int_filter, kWalks}, {"float", float_filter, kWalks},
    {"abs", abs_filter, kShallow}, {"round", round_filter, kShallow}, {"attr", attr, kShallow},
};

const FilterEntry* find_filter(std::string_view name) {
  for (const FilterEntry& entry : kFilters) {
    if (entry.name == name) return &entry;
  }
  return nullptr;
}

}  // namespace

bool is_known_filter(std::string_view name) { return find_filter(name) != nullptr; }

bool filter_walks_subject(std::string_view name) {
  const FilterEntry* entry = find_filter(name);
  return entry == nullptr || entry->walks_subject;
}

Result<Value> apply_filter(std::string_view name, const Value& subject, const Arguments& args, Budget& budget) {
  const FilterEntry* entry = find_filter(name);
  if (entry == nullptr) return make_error("unknown filter '{}'", name);
  return entry->function(subject, args, budget);
}

}  // namespace mnemo::jinja

#include "chat/jinja_value.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <unordered_map>

#include <fmt/format.h>

namespace mnemo::jinja {

namespace {

uint64_t add_saturating(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }

uint64_t total_weight(const List& items) {
  uint64_t total = 1;
  for (const Value& item : items) total = add_saturating(total, item.weight());
  return total;
}

uint64_t total_weight(const Dict& entries) {
  uint64_t total = 1;
  for (const auto& [key, value] : entries) total = add_saturating(total, add_saturating(1 + key.size() / 16, value.weight()));
  return total;
}

bool any_namespace(const List& items) {
  return std::any_of(items.begin(), items.end(), [](const Value& item) { return item.holds_namespace(); });
}

bool any_namespace(const Dict& entries) {
  return std::any_of(entries.begin(), entries.end(), [](const auto& entry) { return entry.second.holds_namespace(); });
}

uint32_t deepest(const List& items) {
  uint32_t deepest_child = 0;
  for (const Value& item : items) deepest_child = std::max(deepest_child, item.nesting());
  return deepest_child;
}

uint32_t deepest(const Dict& entries) {
  uint32_t deepest_child = 0;
  for (const auto& entry : entries) deepest_child = std::max(deepest_child, entry.second.nesting());
  return deepest_child;
}

// Python's float repr: shortest round trip, always with a '.' or exponent ("1.0", "1e+16").
void append_float(double value, std::string* out) {
  if (std::isnan(value)) { out->append("nan"); return; }
  if (std::isinf(value)) { out->append(value > 0 ? "inf" : "-inf"); return; }
  std::string text = fmt::format("{}", value);
  if (text.find_first_of(".e") == std::string::npos) text.append(".0");
  out->append(text);
}

void append_repr_string(const std::string& text, std::string* out) {
  // Python prefers single quotes, and switches to double ones to avoid escaping a quote.
  const char quote = (text.find('\'') != std::string::npos && text.find('"') == std::string::npos) ? '"' : '\'';
  out->push_back(quote);
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == quote || c == '\\') {
      out->push_back('\\');
      out->push_back(c);
    } else if (c == '\n') {
      out->append("\\n");
    } else if (c == '\r') {
      out->append("\\r");
    } else if (c == '\t') {
      out->append("\\t");
    } else if (byte < 0x20 || byte == 0x7f) {
      out->append(fmt::format("\\x{:02x}", byte));
    } else {
      out->push_back(c);
    }
  }
  out->push_back(quote);
}

void append_repr(const Value& value, std::string* out);

// A dict's or namespace's entries as Python writes them: 'key': value, ...
void append_repr_entries(const Value& value, std::string* out) {
  bool first = true;
  for (const auto& [key, item] : value.dict_value()) {
    if (!first) out->append(", ");
    first = false;
    append_repr_string(key, out);
    out->append(": ");
    append_repr(item, out);
  }
}

void append_repr(const Value& value, std::string* out) {
  switch (value.kind()) {
    case Kind::kString: append_repr_string(value.string_value(), out); return;
    case Kind::kList: {
      out->push_back('[');
      bool first = true;
      for (const Value& item : value.list_value()) {
        if (!first) out->append(", ");
        first = false;
        append_repr(item, out);
      }
      out->push_back(']');
      return;
    }
    case Kind::kDict:
      out->push_back('{');
      append_repr_entries(value, out);
      out->push_back('}');
      return;
    case Kind::kNamespace:
      out->append("<Namespace {");
      append_repr_entries(value, out);
      out->append("}>");
      return;
    default: append_str(value, out); return;
  }
}

void append_json_string(const std::string& text, std::string* out) {
  out->push_back('"');
  for (const char c : text) {
    switch (c) {
      case '"': out->append("\\\""); break;
      case '\\': out->append("\\\\"); break;
      case '\n': out->append("\\n"); break;
      case '\r': out->append("\\r"); break;
      case '\t': out->append("\\t"); break;
      case '\b': out->append("\\b"); break;
      case '\f': out->append("\\f"); break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out->append(fmt::format("\\u{:04x}", static_cast<unsigned char>(c)));
        } else {
          out->push_back(c);  // ensure_ascii=False: UTF-8 passes through
        }
    }
  }
  out->push_back('"');
}

class JsonWriter {
 public:
  explicit JsonWriter(const JsonStyle& style) : style_(style) {
    item_separator_ = !style.item_separator.empty() ? style.item_separator : (style.indent >= 0 ? "," : ", ");
    key_separator_ = !style.key_separator.empty() ? style.key_separator : ": ";
  }

  Status write(const Value& value, int level, std::string* out) {
    switch (value.kind()) {
      case Kind::kUndefined: return make_error("Object of type Undefined is not JSON serializable");
      case Kind::kNamespace: return make_error("Object of type Namespace is not JSON serializable");
      case Kind::kNone: out->append("null"); return ok_status();
      case Kind::kBool: out->append(value.bool_value() ? "true" : "false"); return ok_status();
      case Kind::kInt: out->append(fmt::format("{}", value.int_value())); return ok_status();
      case Kind::kFloat: {
        const double number = value.number_value();
        if (std::isnan(number)) out->append("NaN");
        else if (std::isinf(number)) out->append(number > 0 ? "Infinity" : "-Infinity");
        else append_float(number, out);
        return ok_status();
      }
      case Kind::kString: append_json_string(value.string_value(), out); return ok_status();
      case Kind::kList: {
        const List& items = value.list_value();
        if (items.empty()) { out->append("[]"); return ok_status(); }
        out->push_back('[');
        for (size_t i = 0; i < items.size(); ++i) {
          if (i > 0) out->append(item_separator_);
          newline(level + 1, out);
          MNEMO_RETURN_IF_ERROR(write(items[i], level + 1, out));
        }
        newline(level, out);
        out->push_back(']');
        return ok_status();
      }
      case Kind::kDict: {
        std::vector<const std::pair<std::string, Value>*> entries;
        for (const auto& entry : value.dict_value()) entries.push_back(&entry);
        if (entries.empty()) { out->append("{}"); return ok_status(); }
        if (style_.sort_keys) {
          std::sort(entries.begin(), entries.end(), [](const auto* a, const auto* b) { return a->first < b->first; });
        }
        out->push_back('{');
        for (size_t i = 0; i < entries.size(); ++i) {
          if (i > 0) out->append(item_separator_);
          newline(level + 1, out);
          append_json_string(entries[i]->first, out);
          out->append(key_separator_);
          MNEMO_RETURN_IF_ERROR(write(entries[i]->second, level + 1, out));
        }
        newline(level, out);
        out->push_back('}');
        return ok_status();
      }
    }
    return make_error("unknown value kind");
  }

 private:
  void newline(int level, std::string* out) const {
    if (style_.indent < 0) return;
    out->push_back('\n');
    out->append(static_cast<size_t>(level) * static_cast<size_t>(style_.indent), ' ');
  }

  const JsonStyle& style_;
  std::string item_separator_;
  std::string key_separator_;
};

int three_way(double lhs, double rhs) { return lhs < rhs ? -1 : (rhs < lhs ? 1 : 0); }

}  // namespace

Value Value::none() {
  Value value;
  value.storage_ = nullptr;
  return value;
}

Value Value::from_bool(bool b) {
  Value value;
  value.storage_ = b;
  return value;
}

Value Value::from_int(int64_t i) {
  Value value;
  value.storage_ = i;
  return value;
}

Value Value::from_float(double f) {
  Value value;
  value.storage_ = f;
  return value;
}

Value Value::from_string(std::string s) {
  Value value;
  value.weight_ = 1 + s.size() / 16;
  value.storage_ = std::make_shared<const std::string>(std::move(s));
  return value;
}

template <typename Items>
Value Value::holding(Items items) {
  Value value;
  value.nesting_ = 1 + deepest(items);
  value.weight_ = total_weight(items);
  value.holds_namespace_ = any_namespace(items);
  value.storage_ = std::make_shared<const Items>(std::move(items));
  return value;
}

Value Value::from_list(List items) { return holding(std::move(items)); }

Value Value::from_dict(Dict entries) {
  Dict unique;
  unique.reserve(entries.size());
  // Small dicts (messages, loop objects) are searched directly; large ones through an index.
  constexpr size_t kIndexFrom = 16;
  std::unordered_map<std::string_view, size_t> index_of_key;
  for (auto& entry : entries) {
    if (entries.size() < kIndexFrom) {
      auto same_key = std::find_if(unique.begin(), unique.end(), [&](const auto& e) { return e.first == entry.first; });
      if (same_key != unique.end()) same_key->second = std::move(entry.second);
      else unique.push_back(std::move(entry));
      continue;
    }
    const auto found = index_of_key.find(entry.first);
    if (found != index_of_key.end()) {
      unique[found->second].second = std::move(entry.second);
    } else {
      unique.push_back(std::move(entry));  // reserved: keys already indexed do not move
      index_of_key.emplace(unique.back().first, unique.size() - 1);
    }
  }
  return from_distinct_keys(std::move(unique));
}

Value Value::from_distinct_keys(Dict entries) { return holding(std::move(entries)); }

Value Value::new_namespace(Dict attributes) {
  Value value;
  value.nesting_ = 1 + deepest(attributes);
  value.holds_namespace_ = true;
  value.storage_ = std::make_shared<Dict>(std::move(attributes));
  return value;
}

uint64_t Value::weight() const {
  if (kind() == Kind::kNamespace) return total_weight(namespace_attributes());
  return weight_;
}

int64_t Value::int_value() const {
  if (kind() == Kind::kBool) return bool_value() ? 1 : 0;
  return std::get<int64_t>(storage_);
}

double Value::number_value() const {
  if (kind() == Kind::kFloat) return std::get<double>(storage_);
  return static_cast<double>(int_value());
}

const Dict& Value::dict_value() const {
  if (kind() == Kind::kNamespace) return *std::get<kNamespaceIndex>(storage_);
  return *std::get<std::shared_ptr<const Dict>>(storage_);
}

const Value* find_entry(const Dict& dict, std::string_view key) {
  for (const auto& entry : dict) {
    if (entry.first == key) return &entry.second;
  }
  return nullptr;
}

bool truthy(const Value& value) {
  switch (value.kind()) {
    case Kind::kUndefined:
    case Kind::kNone: return false;
    case Kind::kBool: return value.bool_value();
    case Kind::kInt: return value.int_value() != 0;
    case Kind::kFloat: return value.number_value() != 0.0;
    case Kind::kString: return !value.string_value().empty();
    case Kind::kList: return !value.list_value().empty();
    case Kind::kDict: return !value.dict_value().empty();
    case Kind::kNamespace: return true;
  }
  return false;
}

void append_str(const Value& value, std::string* out) {
  switch (value.kind()) {
    case Kind::kUndefined: return;
    case Kind::kNone: out->append("None"); return;
    case Kind::kBool: out->append(value.bool_value() ? "True" : "False"); return;
    case Kind::kInt: out->append(fmt::format("{}", value.int_value())); return;
    case Kind::kFloat: append_float(value.number_value(), out); return;
    case Kind::kString: out->append(value.string_value()); return;
    default: append_repr(value, out); return;
  }
}

std::string to_str(const Value& value) {
  std::string text;
  append_str(value, &text);
  return text;
}

std::string repr(const Value& value) {
  std::string text;
  append_repr(value, &text);
  return text;
}

bool equals(const Value& lhs, const Value& rhs) {
  if (lhs.is_number() && rhs.is_number()) {
    if (lhs.is_integer() && rhs.is_integer()) return lhs.int_value() == rhs.int_value();
    return lhs.number_value() == rhs.number_value();
  }
  if (lhs.kind() != rhs.kind()) return false;
  switch (lhs.kind()) {
    case Kind::kUndefined:
    case Kind::kNone: return true;
    case Kind::kString: return lhs.string_value() == rhs.string_value();
    case Kind::kList: {
      const List& a = lhs.list_value();
      const List& b = rhs.list_value();
      if (a.size() != b.size()) return false;
      for (size_t i = 0; i < a.size(); ++i) {
        if (!equals(a[i], b[i])) return false;
      }
      return true;
    }
    case Kind::kDict: {
      const Dict& a = lhs.dict_value();
      const Dict& b = rhs.dict_value();
      if (a.size() != b.size()) return false;
      for (const auto& [key, item] : a) {
        const Value* other = find_entry(b, key);
        if (other == nullptr || !equals(item, *other)) return false;
      }
      return true;
    }
    case Kind::kNamespace: return &lhs.namespace_attributes() == &rhs.namespace_attributes();
    default: return false;
  }
}

Result<int> compare(const Value& lhs, const Value& rhs) {
  if (lhs.is_number() && rhs.is_number()) {
    if (lhs.is_integer() && rhs.is_integer()) {
      return lhs.int_value() < rhs.int_value() ? -1 : (lhs.int_value() > rhs.int_value() ? 1 : 0);
    }
    return three_way(lhs.number_value(), rhs.number_value());
  }
  if (lhs.is_string() && rhs.is_string()) {
    // Byte order of UTF-8 is code point order, which is Python's string order.
    const int order = lhs.string_value().compare(rhs.string_value());
    return order < 0 ? -1 : (order > 0 ? 1 : 0);
  }
  if (lhs.is_list() && rhs.is_list()) {
    const List& a = lhs.list_value();
    const List& b = rhs.list_value();
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
      if (equals(a[i], b[i])) continue;
      return compare(a[i], b[i]);
    }
    return a.size() < b.size() ? -1 : (a.size() > b.size() ? 1 : 0);
  }
  return make_error("'<' not supported between instances of '{}' and '{}'", type_name(lhs), type_name(rhs));
}

std::string_view type_name(const Value& value) {
  switch (value.kind()) {
    case Kind::kUndefined: return "Undefined";
    case Kind::kNone: return "NoneType";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "str";
    case Kind::kList: return "list";
    case Kind::kDict: return "dict";
    case Kind::kNamespace: return "Namespace";
  }
  return "unknown";
}

Result<std::string> to_json(const Value& value, const JsonStyle& style) {
  std::string text;
  JsonWriter writer(style);
  MNEMO_RETURN_IF_ERROR(writer.write(value, 0, &text));
  return text;
}

}  // namespace mnemo::jinja

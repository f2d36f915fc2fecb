#include "chat/jinja_operators.h"

#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "chat/jinja_text.h"

namespace mnemo::jinja {

namespace {

std::string_view symbol(BinaryOp op) {
  switch (op) {
    case BinaryOp::kAdd: return "+";
    case BinaryOp::kSubtract: return "-";
    case BinaryOp::kMultiply: return "*";
    case BinaryOp::kDivide: return "/";
    case BinaryOp::kFloorDivide: return "//";
    case BinaryOp::kModulo: return "%";
    case BinaryOp::kPower: return "**";
    case BinaryOp::kConcat: return "~";
    case BinaryOp::kAnd: return "and";
    case BinaryOp::kOr: return "or";
    case BinaryOp::kEqual: return "==";
    case BinaryOp::kNotEqual: return "!=";
    case BinaryOp::kLess: return "<";
    case BinaryOp::kLessEqual: return "<=";
    case BinaryOp::kGreater: return ">";
    case BinaryOp::kGreaterEqual: return ">=";
    case BinaryOp::kIn: return "in";
    case BinaryOp::kNotIn: return "not in";
  }
  return "?";
}

Error unsupported(BinaryOp op, const Value& lhs, const Value& rhs) {
  return make_error("unsupported operand types for {}: '{}' and '{}'", symbol(op), type_name(lhs), type_name(rhs));
}

Error overflow(BinaryOp op) { return make_error("integer overflow in '{}'", symbol(op)); }

Result<Value> repeat(const Value& sequence, int64_t times, Budget& budget) {
  const size_t count = times > 0 ? static_cast<size_t>(times) : 0;
  if (sequence.is_string()) {
    const std::string& text = sequence.string_value();
    if (count > 0 && text.size() > budget.limits().max_value_bytes / count) {
      return make_error("string repeated {} times is over the value size limit", times);
    }
    MNEMO_RETURN_IF_ERROR(budget.allocate(text.size() * count));
    std::string result;
    result.reserve(text.size() * count);
    for (size_t i = 0; i < count; ++i) result += text;
    return Value::from_string(std::move(result));
  }
  const List& items = sequence.list_value();
  if (count > 0 && items.size() > budget.limits().max_value_bytes / 16 / count) {
    return make_error("list repeated {} times is over the value size limit", times);
  }
  MNEMO_RETURN_IF_ERROR(budget.allocate_items(items.size() * count));
  List result;
  result.reserve(items.size() * count);
  for (size_t i = 0; i < count; ++i) result.insert(result.end(), items.begin(), items.end());
  return Value::from_list(std::move(result));
}

Result<Value> integer_power(int64_t base, int64_t exponent) {
  int64_t result = 1;
  for (int64_t i = 0; i < exponent; ++i) {
    if (__builtin_mul_overflow(result, base, &result)) return overflow(BinaryOp::kPower);
    if (result == 0 || result == 1) break;  // further factors cannot change it (base 0 or 1)
  }
  if (base == -1) result = (exponent % 2 == 0) ? 1 : -1;
  return Value::from_int(result);
}

Result<Value> arithmetic(BinaryOp op, const Value& lhs, const Value& rhs) {
  const bool integers = lhs.is_integer() && rhs.is_integer();
  if (integers) {
    const int64_t a = lhs.int_value();
    const int64_t b = rhs.int_value();
    int64_t result = 0;
    switch (op) {
      case BinaryOp::kAdd:
        if (__builtin_add_overflow(a, b, &result)) return overflow(op);
        return Value::from_int(result);
      case BinaryOp::kSubtract:
        if (__builtin_sub_overflow(a, b, &result)) return overflow(op);
        return Value::from_int(result);
      case BinaryOp::kMultiply:
        if (__builtin_mul_overflow(a, b, &result)) return overflow(op);
        return Value::from_int(result);
      case BinaryOp::kFloorDivide:
      case BinaryOp::kModulo: {
        if (b == 0) return make_error("integer division or modulo by zero");
        if (a == std::numeric_limits<int64_t>::min() && b == -1) {
          if (op == BinaryOp::kModulo) return Value::from_int(0);
          return overflow(op);
        }
        int64_t quotient = a / b;
        int64_t remainder = a % b;
        if (remainder != 0 && ((remainder < 0) != (b < 0))) {  // floor toward -infinity
          --quotient;
          remainder += b;
        }
        return Value::from_int(op == BinaryOp::kFloorDivide ? quotient : remainder);
      }
      case BinaryOp::kPower:
        if (b >= 0) return integer_power(a, b);
        break;  // negative exponent: a float, below
      default: break;
    }
  }
  const double a = lhs.number_value();
  const double b = rhs.number_value();
  switch (op) {
    case BinaryOp::kAdd: return Value::from_float(a + b);
    case BinaryOp::kSubtract: return Value::from_float(a - b);
    case BinaryOp::kMultiply: return Value::from_float(a * b);
    case BinaryOp::kDivide:
      if (b == 0.0) return make_error("division by zero");
      return Value::from_float(a / b);
    case BinaryOp::kFloorDivide:
      if (b == 0.0) return make_error("float floor division by zero");
      return Value::from_float(std::floor(a / b));
    case BinaryOp::kModulo: {
      if (b == 0.0) return make_error("float modulo by zero");
      double remainder = std::fmod(a, b);
      if (remainder != 0.0 && ((remainder < 0) != (b < 0))) remainder += b;
      return Value::from_float(remainder);
    }
    case BinaryOp::kPower:
      if (a == 0.0 && b < 0) return make_error("zero to a negative power");
      return Value::from_float(std::pow(a, b));
    default: return unsupported(op, lhs, rhs);
  }
}

// Python's slice.indices(): clamps start and stop for a sequence of `length`.
struct SliceBounds {
  int64_t start;
  int64_t stop;
  int64_t step;
};

Result<SliceBounds> slice_bounds(int64_t length, const Value& start, const Value& stop, const Value& step) {
  for (const Value* part : {&start, &stop, &step}) {
    if (!part->is_undefined() && !part->is_none() && !part->is_integer()) {
      return make_error("slice indices must be integers or None, not '{}'", type_name(*part));
    }
  }
  const auto is_set = [](const Value& v) { return v.is_integer(); };
  SliceBounds bounds{0, 0, is_set(step) ? step.int_value() : 1};
  if (bounds.step == 0) return make_error("slice step cannot be zero");
  const int64_t lowest = bounds.step < 0 ? -1 : 0;
  const int64_t highest = bounds.step < 0 ? length - 1 : length;
  const auto clamp = [&](const Value& index, int64_t fallback) {
    if (!is_set(index)) return fallback;
    int64_t i = index.int_value();
    if (i < 0) {
      i = i < -length ? lowest : i + length;  // avoid overflow of i + length for huge negatives
      return i < 0 ? lowest : i;
    }
    return i >= highest ? highest : i;
  };
  bounds.start = clamp(start, bounds.step < 0 ? highest : lowest);
  bounds.stop = clamp(stop, bounds.step < 0 ? lowest : highest);
  return bounds;
}

// How many indices start, start+step, ... lie before stop (computed without overflow).
size_t slice_length(const SliceBounds& bounds) {
  const uint64_t magnitude = bounds.step > 0 ? static_cast<uint64_t>(bounds.step)
                                             : static_cast<uint64_t>(-(bounds.step + 1)) + 1;
  const int64_t span = bounds.step > 0 ? bounds.stop - bounds.start : bounds.start - bounds.stop;
  if (span <= 0) return 0;
  return static_cast<size_t>((static_cast<uint64_t>(span) - 1) / magnitude + 1);
}

size_t slice_index(const SliceBounds& bounds, size_t k) {
  return static_cast<size_t>(bounds.start + static_cast<int64_t>(k) * bounds.step);
}

}  // namespace

Result<bool> contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Kind::kUndefined: return false;
    case Kind::kString:
      if (!item.is_string()) return make_error("'in <string>' requires a string as left operand, not '{}'", type_name(item));
      return container.string_value().find(item.string_value()) != std::string::npos;
    case Kind::kList:
      for (const Value& element : container.list_value()) {
        if (equals(element, item)) return true;
      }
      return false;
    case Kind::kDict:
    case Kind::kNamespace: return item.is_string() && find_entry(container.dict_value(), item.string_value()) != nullptr;
    default: return make_error("argument of type '{}' is not iterable", type_name(container));
  }
}

Result<Value> binary_operation(BinaryOp op, const Value& lhs, const Value& rhs, Budget& budget) {
  switch (op) {
    case BinaryOp::kEqual: return Value::from_bool(equals(lhs, rhs));
    case BinaryOp::kNotEqual: return Value::from_bool(!equals(lhs, rhs));
    case BinaryOp::kLess:
    case BinaryOp::kLessEqual:
    case BinaryOp::kGreater:
    case BinaryOp::kGreaterEqual: {
      MNEMO_ASSIGN_OR_RETURN(const int order, compare(lhs, rhs));
      const bool result = op == BinaryOp::kLess ? order < 0
                          : op == BinaryOp::kLessEqual ? order <= 0
                          : op == BinaryOp::kGreater ? order > 0
                                                     : order >= 0;
      return Value::from_bool(result);
    }
    case BinaryOp::kIn:
    case BinaryOp::kNotIn: {
      MNEMO_ASSIGN_OR_RETURN(const bool found, contains(rhs, lhs));
      return Value::from_bool(op == BinaryOp::kIn ? found : !found);
    }
    case BinaryOp::kConcat: {
      std::string text = to_str(lhs);
      const std::string right = to_str(rhs);
      MNEMO_RETURN_IF_ERROR(budget.allocate(text.size() + right.size()));
      text += right;
      return Value::from_string(std::move(text));
    }
    case BinaryOp::kAdd:
      if (lhs.is_string() && rhs.is_string()) {
        MNEMO_RETURN_IF_ERROR(budget.allocate(lhs.string_value().size() + rhs.string_value().size()));
        return Value::from_string(lhs.string_value() + rhs.string_value());
      }
      if (lhs.is_list() && rhs.is_list()) {
        MNEMO_RETURN_IF_ERROR(budget.allocate_items(lhs.list_value().size() + rhs.list_value().size()));
        List items = lhs.list_value();
        items.insert(items.end(), rhs.list_value().begin(), rhs.list_value().end());
        return Value::from_list(std::move(items));
      }
      break;
    case BinaryOp::kMultiply:
      if ((lhs.is_string() || lhs.is_list()) && rhs.is_integer()) return repeat(lhs, rhs.int_value(), budget);
      if (lhs.is_integer() && (rhs.is_string() || rhs.is_list())) return repeat(rhs, lhs.int_value(), budget);
      break;
    default: break;
  }
  if (lhs.is_number() && rhs.is_number()) return arithmetic(op, lhs, rhs);
  return unsupported(op, lhs, rhs);
}

Value get_item(const Value& object, const Value& index) {
  if (object.is_dict() || object.is_namespace()) {
    if (!index.is_string() && index.kind() != Kind::kInt) return Value();
    const Value* entry = find_entry(object.dict_value(), index.is_string() ? index.string_value() : to_str(index));
    return entry != nullptr ? *entry : Value();
  }
  if (!index.is_integer() || (!object.is_list() && !object.is_string())) return Value();
  int64_t i = index.int_value();
  if (object.is_list()) {
    const auto size = static_cast<int64_t>(object.list_value().size());
    if (i < 0) i += size;
    if (i < 0 || i >= size) return Value();
    return object.list_value()[static_cast<size_t>(i)];
  }
  const std::string& text = object.string_value();
  const std::vector<size_t> offsets = char_offsets(text);
  const auto size = static_cast<int64_t>(offsets.size() - 1);
  if (i < 0) i += size;
  if (i < 0 || i >= size) return Value();
  const auto k = static_cast<size_t>(i);
  return Value::from_string(text.substr(offsets[k], offsets[k + 1] - offsets[k]));
}

Value get_attribute(const Value& object, std::string_view name) {
  if (!object.is_dict() && !object.is_namespace()) return Value();
  const Value* entry = find_entry(object.dict_value(), name);
  return entry != nullptr ? *entry : Value();
}

Result<Value> slice(const Value& object, const Value& start, const Value& stop, const Value& step, Budget& budget) {
  if (object.is_list()) {
    const List& items = object.list_value();
    MNEMO_ASSIGN_OR_RETURN(const SliceBounds bounds, slice_bounds(static_cast<int64_t>(items.size()), start, stop, step));
    const size_t count = slice_length(bounds);
    MNEMO_RETURN_IF_ERROR(budget.allocate_items(count));
    List result;
    result.reserve(count);
    for (size_t k = 0; k < count; ++k) result.push_back(items[slice_index(bounds, k)]);
    return Value::from_list(std::move(result));
  }
  if (object.is_string()) {
    const std::string& text = object.string_value();
    const std::vector<size_t> offsets = char_offsets(text);
    MNEMO_ASSIGN_OR_RETURN(const SliceBounds bounds,
                           slice_bounds(static_cast<int64_t>(offsets.size() - 1), start, stop, step));
    const size_t count = slice_length(bounds);
    std::string result;
    for (size_t k = 0; k < count; ++k) {
      const size_t i = slice_index(bounds, k);
      result.append(text, offsets[i], offsets[i + 1] - offsets[i]);
    }
    MNEMO_RETURN_IF_ERROR(budget.allocate(result.size()));
    return Value::from_string(std::move(result));
  }
  return make_error("'{}' object is not subscriptable with a slice", type_name(object));
}

}  // namespace mnemo::jinja

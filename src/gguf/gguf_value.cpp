#include "gguf/gguf_value.h"

#include <type_traits>

namespace mnemo::gguf {

std::string_view value_type_name(ValueType type) {
  switch (type) {
    case ValueType::kUint8: return "uint8";
    case ValueType::kInt8: return "int8";
    case ValueType::kUint16: return "uint16";
    case ValueType::kInt16: return "int16";
    case ValueType::kUint32: return "uint32";
    case ValueType::kInt32: return "int32";
    case ValueType::kFloat32: return "float32";
    case ValueType::kBool: return "bool";
    case ValueType::kString: return "string";
    case ValueType::kArray: return "array";
    case ValueType::kUint64: return "uint64";
    case ValueType::kInt64: return "int64";
    case ValueType::kFloat64: return "float64";
  }
  return "unknown";
}

bool Value::as_int64(int64_t* out) const {
  return std::visit(
      [out](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, uint64_t>) {
          if (x > static_cast<uint64_t>(INT64_MAX)) return false;
          *out = static_cast<int64_t>(x);
          return true;
        } else if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
          *out = static_cast<int64_t>(x);
          return true;
        } else {
          return false;
        }
      },
      v);
}

bool Value::as_double(double* out) const {
  return std::visit(
      [out](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) {
          *out = static_cast<double>(x);
          return true;
        } else {
          return false;
        }
      },
      v);
}

}  // namespace mnemo::gguf

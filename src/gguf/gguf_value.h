// GGUF metadata values: every scalar type, strings, and (nested) arrays.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace mnemo::gguf {

enum class ValueType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

std::string_view value_type_name(ValueType type);

struct Value;

struct Array {
  ValueType elem_type = ValueType::kUint8;
  std::vector<Value> items;
};

// The variant's alternative order follows ValueType's numbering so that index() == type id.
struct Value {
  using Storage = std::variant<uint8_t, int8_t, uint16_t, int16_t, uint32_t, int32_t, float, bool,
                               std::string, Array, uint64_t, int64_t, double>;
  Storage v;

  ValueType type() const { return static_cast<ValueType>(v.index()); }

  // Integer value of any integer type (bool excluded), if it is one.
  bool as_int64(int64_t* out) const;
  // Numeric value of any integer or float type.
  bool as_double(double* out) const;
};

}  // namespace mnemo::gguf

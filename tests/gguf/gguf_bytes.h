// Builds GGUF bytes field by field, so tests can write files the Writer refuses to make (bad
// counts, types, dimensions, offsets). Little-endian like the format.
#pragma once

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string_view>
#include <type_traits>
#include <vector>

#include "gguf/gguf_value.h"

namespace mnemo::gguf::testing {

inline constexpr uint32_t kMagic = 0x46554747;

class GgufBytes {
 public:
  template <class T>
  GgufBytes& put(T value) {
    static_assert(std::is_trivially_copyable_v<T>);
    uint8_t raw[sizeof(T)];
    std::memcpy(raw, &value, sizeof(T));
    bytes_.insert(bytes_.end(), raw, raw + sizeof(T));
    return *this;
  }
  GgufBytes& u8(uint8_t v) { return put(v); }
  GgufBytes& u32(uint32_t v) { return put(v); }
  GgufBytes& u64(uint64_t v) { return put(v); }
  GgufBytes& str(std::string_view s) {
    u64(s.size());
    bytes_.insert(bytes_.end(), s.begin(), s.end());
    return *this;
  }
  GgufBytes& type(ValueType t) { return u32(static_cast<uint32_t>(t)); }

  GgufBytes& header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
    return u32(kMagic).u32(version).u64(n_tensors).u64(n_kv);
  }
  GgufBytes& kv_u32(std::string_view key, uint32_t value) { return str(key).type(ValueType::kUint32).u32(value); }
  GgufBytes& kv_string(std::string_view key, std::string_view value) {
    return str(key).type(ValueType::kString).str(value);
  }
  GgufBytes& tensor_info(std::string_view name, std::initializer_list<uint64_t> dims, uint32_t type_id,
                         uint64_t offset) {
    str(name).u32(static_cast<uint32_t>(dims.size()));
    for (uint64_t d : dims) u64(d);
    return u32(type_id).u64(offset);
  }
  GgufBytes& pad_to(size_t alignment) {
    while (bytes_.size() % alignment != 0) bytes_.push_back(0);
    return *this;
  }
  GgufBytes& zeros(size_t n) {
    bytes_.resize(bytes_.size() + n, 0);
    return *this;
  }

  size_t size() const { return bytes_.size(); }
  const std::vector<uint8_t>& bytes() const { return bytes_; }

 private:
  std::vector<uint8_t> bytes_;
};

}  // namespace mnemo::gguf::testing

#include "gguf/gguf_writer.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>
#include <type_traits>

namespace mnemo::gguf {
namespace {

class ByteSink {
 public:
  template <class T>
  void put(T value) {
    static_assert(std::is_trivially_copyable_v<T>);
    append(&value, sizeof(T));
  }
  void put_string(const std::string& s) {
    put<uint64_t>(s.size());
    append(s.data(), s.size());
  }
  void put_value(const Value& value) {
    std::visit(
        [this](const auto& x) {
          using T = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<T, std::string>) {
            put_string(x);
          } else if constexpr (std::is_same_v<T, Array>) {
            put<uint32_t>(static_cast<uint32_t>(x.elem_type));
            put<uint64_t>(x.items.size());
            for (const Value& item : x.items) put_value(item);
          } else if constexpr (std::is_same_v<T, bool>) {
            put<uint8_t>(x ? 1 : 0);
          } else {
            put<T>(x);
          }
        },
        value.v);
  }
  void pad_to(uint64_t alignment) {
    while (out_.size() % alignment != 0) out_.push_back(0);
  }
  // resize + memcpy rather than insert(): GCC 12 reports a false stringop-overflow for the
  // latter at -O3.
  void append(const void* data, size_t n) {
    const size_t old_size = out_.size();
    out_.resize(old_size + n);
    if (n > 0) std::memcpy(out_.data() + old_size, data, n);
  }
  std::vector<uint8_t>& bytes() { return out_; }

 private:
  std::vector<uint8_t> out_;
};

template <class T>
Value array_of(ValueType type, const std::vector<T>& values) {
  Array array;
  array.elem_type = type;
  array.items.reserve(values.size());
  for (const T& v : values) array.items.push_back(Value{v});
  return Value{std::move(array)};
}

}  // namespace

void Writer::set(std::string key, Value value) {
  for (auto& [k, v] : metadata_) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  metadata_.emplace_back(std::move(key), std::move(value));
}

void Writer::set_string_array(std::string key, const std::vector<std::string>& values) {
  set(std::move(key), array_of(ValueType::kString, values));
}
void Writer::set_f32_array(std::string key, const std::vector<float>& values) {
  set(std::move(key), array_of(ValueType::kFloat32, values));
}
void Writer::set_i32_array(std::string key, const std::vector<int32_t>& values) {
  set(std::move(key), array_of(ValueType::kInt32, values));
}

Status Writer::add_tensor(std::string name, DType type, std::vector<int64_t> dims,
                          std::span<const uint8_t> data) {
  if (dims.empty()) return make_error("gguf writer: tensor '{}' has no dimensions", name);
  const std::optional<DTypeInfo> type_info = dtype_info(static_cast<uint32_t>(type));
  if (!type_info) return make_error("gguf writer: tensor '{}': unknown type {}", name, static_cast<uint32_t>(type));
  const DTypeInfo& info = *type_info;
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d <= 0 || __builtin_mul_overflow(n, d, &n)) {
      return make_error("gguf writer: tensor '{}': bad dimension {}", name, d);
    }
  }
  if (dims[0] % info.block_elems != 0) {
    return make_error("gguf writer: tensor '{}': row {} not a multiple of block {}", name, dims[0], info.block_elems);
  }
  const size_t expected = static_cast<size_t>(n / info.block_elems) * info.block_bytes;
  if (data.size() != expected) {
    return make_error("gguf writer: tensor '{}': {} bytes given, {} expected", name, data.size(), expected);
  }
  tensors_.push_back({std::move(name), type, std::move(dims), {data.begin(), data.end()}});
  return ok_status();
}

std::vector<uint8_t> Writer::to_bytes() const {
  // Alignment 0 would divide by zero; such a writer still records 0 so tests get that bad file.
  const uint64_t padding = std::max<uint32_t>(alignment_, 1);
  const bool user_alignment = std::any_of(metadata_.begin(), metadata_.end(),
                                          [](const auto& kv) { return kv.first == "general.alignment"; });
  const bool custom_alignment = alignment_ != kDefaultAlignment && !user_alignment;
  ByteSink sink;
  sink.put<uint32_t>(0x46554747);
  sink.put<uint32_t>(3);
  sink.put<uint64_t>(tensors_.size());
  sink.put<uint64_t>(metadata_.size() + (custom_alignment ? 1 : 0));
  if (custom_alignment) {
    sink.put_string("general.alignment");
    sink.put<uint32_t>(static_cast<uint32_t>(ValueType::kUint32));
    sink.put<uint32_t>(alignment_);
  }
  for (const auto& [key, value] : metadata_) {
    sink.put_string(key);
    sink.put<uint32_t>(static_cast<uint32_t>(value.type()));
    sink.put_value(value);
  }
  uint64_t offset = 0;
  for (const Tensor& t : tensors_) {
    sink.put_string(t.name);
    sink.put<uint32_t>(static_cast<uint32_t>(t.dims.size()));
    for (int64_t d : t.dims) sink.put<uint64_t>(static_cast<uint64_t>(d));
    sink.put<uint32_t>(static_cast<uint32_t>(t.type));
    sink.put<uint64_t>(offset);
    offset += (t.data.size() + padding - 1) / padding * padding;
  }
  sink.pad_to(padding);
  for (const Tensor& t : tensors_) {
    sink.append(t.data.data(), t.data.size());
    sink.pad_to(padding);
  }
  return std::move(sink.bytes());
}

Status Writer::write(const std::string& path) const {
  const std::vector<uint8_t> bytes = to_bytes();
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return make_error("{}: cannot create: {}", path, std::strerror(errno));
  const size_t written = std::fwrite(bytes.data(), 1, bytes.size(), f);
  const bool closed = std::fclose(f) == 0;
  if (written != bytes.size() || !closed) return make_error("{}: write failed", path);
  return ok_status();
}

}  // namespace mnemo::gguf

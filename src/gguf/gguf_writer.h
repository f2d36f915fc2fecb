// Writes GGUF v3 files: used by tests and tools to make tiny models and malformed variants.
//
// Tensor data is padded to the constructor's alignment, which is recorded as general.alignment
// when it is not the default. A general.alignment set explicitly is written as given instead (and
// may disagree with the padding), so tests can make files with bad alignment values.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "gguf/gguf_file.h"
#include "gguf/gguf_value.h"
#include "tensor/dtype.h"
#include "util/result.h"

namespace mnemo::gguf {

class Writer {
 public:
  explicit Writer(uint32_t alignment = kDefaultAlignment) : alignment_(alignment) {}

  void set(std::string key, Value value);
  void set_string(std::string key, std::string value) { set(std::move(key), Value{std::move(value)}); }
  void set_u32(std::string key, uint32_t value) { set(std::move(key), Value{value}); }
  void set_i32(std::string key, int32_t value) { set(std::move(key), Value{value}); }
  void set_f32(std::string key, float value) { set(std::move(key), Value{value}); }
  void set_bool(std::string key, bool value) { set(std::move(key), Value{value}); }
  void set_string_array(std::string key, const std::vector<std::string>& values);
  void set_f32_array(std::string key, const std::vector<float>& values);
  void set_i32_array(std::string key, const std::vector<int32_t>& values);

  // dims[0] is the row (contiguous) dimension; data must be exactly the tensor's bytes.
  Status add_tensor(std::string name, DType type, std::vector<int64_t> dims, std::span<const uint8_t> data);

  std::vector<uint8_t> to_bytes() const;
  Status write(const std::string& path) const;

 private:
  struct Tensor {
    std::string name;
    DType type;
    std::vector<int64_t> dims;
    std::vector<uint8_t> data;
  };

  uint32_t alignment_;
  std::vector<std::pair<std::string, Value>> metadata_;
  std::vector<Tensor> tensors_;
};

}  // namespace mnemo::gguf

// Reader for GGUF files, versions 2 and 3 (https://github.com/ggml-org/ggml/blob/master/docs/gguf.md).
//
// The whole file is mapped; tensor data is used in place. Parsing validates everything before
// anything is used: a malformed file (bad magic or version, truncation, counts that overflow or
// exceed the file, unknown value or tensor types, duplicate keys or tensor names, misaligned or
// out-of-range tensor data) yields an Error naming the file and the problem, never a crash or an
// out-of-bounds read.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/gguf_value.h"
#include "tensor/dtype.h"
#include "util/mapped_file.h"
#include "util/result.h"

namespace mnemo::gguf {

inline constexpr int kMaxDims = 4;
inline constexpr uint32_t kDefaultAlignment = 32;

struct TensorInfo {
  std::string name;
  std::vector<int64_t> dims;  // dims[0] is the contiguous (row) dimension
  DType type = DType::F32;
  uint64_t offset = 0;  // relative to the data section
  int64_t n_elements = 0;
  size_t n_bytes = 0;
  const uint8_t* data = nullptr;  // into the mapping; valid while the File lives

  int64_t rows() const { return dims.empty() ? 0 : n_elements / dims[0]; }
};

class File {
 public:
  static Result<File> open(const std::string& path);
  // Parses bytes that the caller keeps alive (fuzzing, in-memory tests). `name` appears in errors.
  static Result<File> parse(std::span<const uint8_t> bytes, std::string name);

  File(File&&) noexcept = default;
  File& operator=(File&&) noexcept = default;

  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  const std::string& name() const { return name_; }

  const std::vector<std::pair<std::string, Value>>& metadata() const { return metadata_; }
  const Value* find(std::string_view key) const;
  bool has(std::string_view key) const { return find(key) != nullptr; }

  // Typed getters: an Error names the key when it is missing or of the wrong type.
  Result<std::string> get_string(std::string_view key) const;
  Result<int64_t> get_int(std::string_view key) const;  // any integer type
  Result<double> get_float(std::string_view key) const;  // any numeric type
  Result<bool> get_bool(std::string_view key) const;
  Result<std::vector<std::string>> get_string_array(std::string_view key) const;
  Result<std::vector<float>> get_float_array(std::string_view key) const;
  Result<std::vector<int64_t>> get_int_array(std::string_view key) const;

  // With a default for optional keys; still an Error when present with the wrong type.
  Result<int64_t> get_int_or(std::string_view key, int64_t fallback) const;
  Result<double> get_float_or(std::string_view key, double fallback) const;
  Result<bool> get_bool_or(std::string_view key, bool fallback) const;
  Result<std::string> get_string_or(std::string_view key, std::string fallback) const;

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  // See MappedFile::release_pages (nothing happens for parsed bytes the caller owns).
  void release_pages(const void* begin, size_t n) const { mapping_.release_pages(begin, n); }
  const TensorInfo* find_tensor(std::string_view name) const;

 private:
  File() = default;
  Error key_error(std::string_view key, std::string_view problem) const;

  MappedFile mapping_;
  std::string name_;
  uint32_t version_ = 0;
  uint32_t alignment_ = kDefaultAlignment;
  std::vector<std::pair<std::string, Value>> metadata_;
  std::map<std::string, size_t, std::less<>> metadata_index_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;

  friend class Parser;
};

}  // namespace mnemo::gguf

#include "gguf/gguf_file.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <utility>

namespace mnemo::gguf {

namespace {
constexpr uint32_t kMagic = 0x46554747;  // "GGUF" little-endian
constexpr int kMaxArrayDepth = 8;
// Smallest encoded size of one metadata entry (empty key + type + smallest value) and of one
// tensor info (empty name + n_dims + type + offset); they bound counts by the bytes left.
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;
// Counts are bounded by the bytes left, but one encoded byte can become a much larger in-memory
// object; reserving only this much up front keeps a hostile count from allocating gigabytes before
// the data behind it has been seen.
constexpr uint64_t kMaxReserve = 4096;
constexpr int64_t kMaxAlignment = int64_t{1} << 20;

uint64_t min_encoded_size(ValueType type) {
  switch (type) {
    case ValueType::kUint8: case ValueType::kInt8: case ValueType::kBool: return 1;
    case ValueType::kUint16: case ValueType::kInt16: return 2;
    case ValueType::kUint32: case ValueType::kInt32: case ValueType::kFloat32: return 4;
    case ValueType::kUint64: case ValueType::kInt64: case ValueType::kFloat64: return 8;
    case ValueType::kString: return 8;
    case ValueType::kArray: return 12;
  }
  return 1;
}
}  // namespace

// Reads the header with bounds checks; every failure says what and at which byte offset.
class Parser {
 public:
  Parser(std::span<const uint8_t> bytes, File* file) : bytes_(bytes), file_(file) {}

  Status run();

 private:
  Error fail(std::string_view what) const {
    if (where_.empty()) return make_error("{}: {} (at byte {})", file_->name_, what, pos_);
    return make_error("{}: {}: {} (at byte {})", file_->name_, where_, what, pos_);
  }
  uint64_t left() const { return bytes_.size() - pos_; }

  template <class T>
  Result<T> read() {
    if (left() < sizeof(T)) return fail(fmt::format("truncated: need {} bytes", sizeof(T)));
    T value;
    std::memcpy(&value, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return value;
  }
  Result<std::string> read_string();
  Result<Value> read_value(ValueType type, int depth);
  Result<ValueType> read_value_type();
  Status read_metadata(uint64_t count);
  Status read_tensor_infos(uint64_t count);
  Status place_tensors();

  std::span<const uint8_t> bytes_;
  File* file_;
  size_t pos_ = 0;
  std::string where_;  // the metadata key or tensor being read, for error messages
};

Result<std::string> Parser::read_string() {
  MNEMO_ASSIGN_OR_RETURN(uint64_t length, read<uint64_t>());
  if (length > left()) return fail(fmt::format("string length {} exceeds the file", length));
  std::string s(reinterpret_cast<const char*>(bytes_.data() + pos_), length);
  pos_ += length;
  return s;
}

Result<ValueType> Parser::read_value_type() {
  MNEMO_ASSIGN_OR_RETURN(uint32_t raw, read<uint32_t>());
  if (raw > static_cast<uint32_t>(ValueType::kFloat64)) {
    return fail(fmt::format("unknown metadata value type {}", raw));
  }
  return static_cast<ValueType>(raw);
}

Result<Value> Parser::read_value(ValueType type, int depth) {
  Value value;
  switch (type) {
    case ValueType::kUint8: { MNEMO_ASSIGN_OR_RETURN(value.v, read<uint8_t>()); break; }
    case ValueType::kInt8: { MNEMO_ASSIGN_OR_RETURN(value.v, read<int8_t>()); break; }
    case ValueType::kUint16: { MNEMO_ASSIGN_OR_RETURN(value.v, read<uint16_t>()); break; }
    case ValueType::kInt16: { MNEMO_ASSIGN_OR_RETURN(value.v, read<int16_t>()); break; }
    case ValueType::kUint32: { MNEMO_ASSIGN_OR_RETURN(value.v, read<uint32_t>()); break; }
    case ValueType::kInt32: { MNEMO_ASSIGN_OR_RETURN(value.v, read<int32_t>()); break; }
    case ValueType::kFloat32: { MNEMO_ASSIGN_OR_RETURN(value.v, read<float>()); break; }
    case ValueType::kUint64: { MNEMO_ASSIGN_OR_RETURN(value.v, read<uint64_t>()); break; }
    case ValueType::kInt64: { MNEMO_ASSIGN_OR_RETURN(value.v, read<int64_t>()); break; }
    case ValueType::kFloat64: { MNEMO_ASSIGN_OR_RETURN(value.v, read<double>()); break; }
    case ValueType::kBool: {
      MNEMO_ASSIGN_OR_RETURN(uint8_t b, read<uint8_t>());
      if (b > 1) return fail(fmt::format("bool value {} is neither 0 nor 1", b));
      value.v = b == 1;
      break;
    }
    case ValueType::kString: { MNEMO_ASSIGN_OR_RETURN(value.v, read_string()); break; }
    case ValueType::kArray: {
      if (depth >= kMaxArrayDepth) return fail("arrays nested too deeply");
      MNEMO_ASSIGN_OR_RETURN(ValueType elem_type, read_value_type());
      MNEMO_ASSIGN_OR_RETURN(uint64_t count, read<uint64_t>());
      if (count > left() / min_encoded_size(elem_type)) {
        return fail(fmt::format("array of {} {} exceeds the file", count, value_type_name(elem_type)));
      }
      Array array;
      array.elem_type = elem_type;
      array.items.reserve(std::min(count, kMaxReserve));
      for (uint64_t i = 0; i < count; ++i) {
        MNEMO_ASSIGN_OR_RETURN(Value item, read_value(elem_type, depth + 1));
        array.items.push_back(std::move(item));
      }
      value.v = std::move(array);
      break;
    }
  }
  return value;
}

Status Parser::read_metadata(uint64_t count) {
  if (count > left() / kMinKvBytes) return fail(fmt::format("metadata count {} exceeds the file", count));
  file_->metadata_.reserve(std::min(count, kMaxReserve));
  for (uint64_t i = 0; i < count; ++i) {
    where_ = fmt::format("metadata entry {}", i);
    MNEMO_ASSIGN_OR_RETURN(std::string key, read_string());
    where_ = fmt::format("metadata '{}'", key);
    MNEMO_ASSIGN_OR_RETURN(ValueType type, read_value_type());
    MNEMO_ASSIGN_OR_RETURN(Value value, read_value(type, 0));
    if (file_->metadata_index_.count(key) != 0) return fail("duplicate metadata key");
    file_->metadata_index_.emplace(key, file_->metadata_.size());
    file_->metadata_.emplace_back(std::move(key), std::move(value));
  }
  where_.clear();
  if (const Value* align = file_->find("general.alignment")) {
    int64_t a = 0;
    const bool is_integer = align->as_int64(&a);
    if (!is_integer || a <= 0 || a > kMaxAlignment || !std::has_single_bit(static_cast<uint64_t>(a))) {
      const std::string shown = is_integer ? std::to_string(a) : std::string(value_type_name(align->type()));
      return make_error("{}: metadata 'general.alignment': {} is not a power of two up to {}", file_->name_,
                        shown, kMaxAlignment);
    }
    file_->alignment_ = static_cast<uint32_t>(a);
  }
  return ok_status();
}

Status Parser::read_tensor_infos(uint64_t count) {
  if (count > left() / kMinTensorInfoBytes) return fail(fmt::format("tensor count {} exceeds the file", count));
  file_->tensors_.reserve(std::min(count, kMaxReserve));
  for (uint64_t i = 0; i < count; ++i) {
    TensorInfo info;
    where_ = fmt::format("tensor info {}", i);
    MNEMO_ASSIGN_OR_RETURN(info.name, read_string());
    where_ = fmt::format("tensor '{}'", info.name);
    MNEMO_ASSIGN_OR_RETURN(uint32_t n_dims, read<uint32_t>());
    if (n_dims == 0 || n_dims > kMaxDims) return fail(fmt::format("{} dimensions (1..{} allowed)", n_dims, kMaxDims));
    int64_t n_elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      MNEMO_ASSIGN_OR_RETURN(uint64_t dim, read<uint64_t>());
      if (dim == 0 || dim > static_cast<uint64_t>(INT64_MAX)) return fail(fmt::format("dimension {} is {}", d, dim));
      if (__builtin_mul_overflow(n_elements, static_cast<int64_t>(dim), &n_elements)) {
        return fail("element count overflows");
      }
      info.dims.push_back(static_cast<int64_t>(dim));
    }
    info.n_elements = n_elements;
    MNEMO_ASSIGN_OR_RETURN(uint32_t type_id, read<uint32_t>());
    const auto type_info = dtype_info(type_id);
    if (!type_info) return fail(fmt::format("unknown tensor type {}", type_id));
    info.type = static_cast<DType>(type_id);
    if (info.dims[0] % type_info->block_elems != 0) {
      return fail(fmt::format("row of {} elements is not a whole number of {} blocks of {}", info.dims[0],
                              type_info->name, type_info->block_elems));
    }
    const uint64_t blocks = static_cast<uint64_t>(n_elements / type_info->block_elems);
    uint64_t n_bytes = 0;
    if (__builtin_mul_overflow(blocks, static_cast<uint64_t>(type_info->block_bytes), &n_bytes)) {
      return fail("byte size overflows");
    }
    info.n_bytes = n_bytes;
    MNEMO_ASSIGN_OR_RETURN(info.offset, read<uint64_t>());
    if (file_->tensor_index_.count(info.name) != 0) return fail("duplicate tensor name");
    file_->tensor_index_.emplace(info.name, file_->tensors_.size());
    file_->tensors_.push_back(std::move(info));
  }
  where_.clear();
  return ok_status();
}

Status Parser::place_tensors() {
  const uint64_t align = file_->alignment_;
  const uint64_t data_start = (pos_ + align - 1) / align * align;
  if (file_->tensors_.empty()) return ok_status();
  if (data_start > bytes_.size()) return fail("truncated before the tensor data section");
  const uint64_t data_size = bytes_.size() - data_start;
  for (TensorInfo& info : file_->tensors_) {
    if (info.offset % align != 0) {
      return make_error("{}: tensor '{}': offset {} is not aligned to {}", file_->name_, info.name, info.offset, align);
    }
    if (info.offset > data_size || info.n_bytes > data_size - info.offset) {
      return make_error("{}: tensor '{}': data [{}, +{}) lies outside the data section of {} bytes",
                        file_->name_, info.name, info.offset, info.n_bytes, data_size);
    }
    info.data = bytes_.data() + data_start + info.offset;
  }
  return ok_status();
}

Status Parser::run() {
  MNEMO_ASSIGN_OR_RETURN(uint32_t magic, read<uint32_t>());
  if (magic != kMagic) return make_error("{}: not a GGUF file (bad magic 0x{:08x})", file_->name_, magic);
  MNEMO_ASSIGN_OR_RETURN(file_->version_, read<uint32_t>());
  if (file_->version_ != 2 && file_->version_ != 3) {
    return make_error("{}: unsupported GGUF version {} (2 and 3 are supported)", file_->name_, file_->version_);
  }
  MNEMO_ASSIGN_OR_RETURN(uint64_t n_tensors, read<uint64_t>());
  MNEMO_ASSIGN_OR_RETURN(uint64_t n_kv, read<uint64_t>());
  MNEMO_RETURN_IF_ERROR(read_metadata(n_kv));
  MNEMO_RETURN_IF_ERROR(read_tensor_infos(n_tensors));
  return place_tensors();
}

Result<File> File::parse(std::span<const uint8_t> bytes, std::string name) {
  File file;
  file.name_ = std::move(name);
  Parser parser(bytes, &file);
  MNEMO_RETURN_IF_ERROR(parser.run());
  return file;
}

Result<File> File::open(const std::string& path) {
  MNEMO_ASSIGN_OR_RETURN(MappedFile mapping, MappedFile::open(path));
  const std::span<const uint8_t> bytes = mapping.bytes();
  MNEMO_ASSIGN_OR_RETURN(File file, parse(bytes, path));
  file.mapping_ = std::move(mapping);  // moving the mapping keeps its address: pointers stay valid
  return file;
}

const Value* File::find(std::string_view key) const {
  const auto it = metadata_index_.find(key);
  return it == metadata_index_.end() ? nullptr : &metadata_[it->second].second;
}

const TensorInfo* File::find_tensor(std::string_view name) const {
  const auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

Error File::key_error(std::string_view key, std::string_view problem) const {
  return make_error("{}: metadata '{}': {}", name_, key, problem);
}

Result<std::string> File::get_string(std::string_view key) const {
  const Value* v = find(key);
  if (v == nullptr) return key_error(key, "missing");
  if (const auto* s = std::get_if<std::string>(&v->v)) return *s;
  return key_error(key, fmt::format("expected a string, found {}", value_type_name(v->type())));
}

Result<int64_t> File::get_int(std::string_view key) const {
  const Value* v = find(key);
  if (v == nullptr) return key_error(key, "missing");
  int64_t out = 0;
  if (v->as_int64(&out)) return out;
  return key_error(key, fmt::format("expected an integer, found {}", value_type_name(v->type())));
}

Result<double> File::get_float(std::string_view key) const {
  const Value* v = find(key);
  if (v == nullptr) return key_error(key, "missing");
  double out = 0;
  if (v->as_double(&out)) return out;
  return key_error(key, fmt::format("expected a number, found {}", value_type_name(v->type())));
}

Result<bool> File::get_bool(std::string_view key) const {
  const Value* v = find(key);
  if (v == nullptr) return key_error(key, "missing");
  if (const auto* b = std::get_if<bool>(&v->v)) return *b;
  return key_error(key, fmt::format("expected a bool, found {}", value_type_name(v->type())));
}

Result<std::vector<std::string>> File::get_string_array(std::string_view key) const {
  const Value* v = find(key);
  if (v == nullptr) return key_error(key, "missing");
  const auto* array = std::get_if<Array>(&v->v);
  if (array == nullptr || array->elem_type != ValueType::kString) return key_error(key, "expected an array of strings");
  std::vector<std::string> out;
  out.reserve(array->items.size());
  for (const Value& item : array->items) out.push_back(std::get<std::string>(item.v));
  return out;
}

Result<std::vector<float>> File::get_float_array(std::string_view key) const {
  const Value* v = find(key);
  if (v == nullptr) return key_error(key, "missing");
  const auto* array = std::get_if<Array>(&v->v);
  if (array == nullptr) return key_error(key, "expected an array of numbers");
  std::vector<float> out;
  out.reserve(array->items.size());
  for (const Value& item : array->items) {
    double d = 0;
    if (!item.as_double(&d)) return key_error(key, "expected an array of numbers");
    out.push_back(static_cast<float>(d));
  }
  return out;
}

Result<std::vector<int64_t>> File::get_int_array(std::string_view key) const {
  const Value* v = find(key);
  if (v == nullptr) return key_error(key, "missing");
  const auto* array = std::get_if<Array>(&v->v);
  if (array == nullptr) return key_error(key, "expected an array of integers");
  std::vector<int64_t> out;
  out.reserve(array->items.size());
  for (const Value& item : array->items) {
    int64_t i = 0;
    if (!item.as_int64(&i)) return key_error(key, "expected an array of integers");
    out.push_back(i);
  }
  return out;
}

Result<int64_t> File::get_int_or(std::string_view key, int64_t fallback) const {
  return has(key) ? get_int(key) : Result<int64_t>(fallback);
}
Result<double> File::get_float_or(std::string_view key, double fallback) const {
  return has(key) ? get_float(key) : Result<double>(fallback);
}
Result<bool> File::get_bool_or(std::string_view key, bool fallback) const {
  return has(key) ? get_bool(key) : Result<bool>(fallback);
}
Result<std::string> File::get_string_or(std::string_view key, std::string fallback) const {
  return has(key) ? get_string(key) : Result<std::string>(std::move(fallback));
}

}  // namespace mnemo::gguf

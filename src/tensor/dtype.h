// Element types of GGUF tensors. The numeric values are the GGUF/ggml type ids, so they can be
// read straight from a file. Every id the format defines has a known block geometry (so a reader
// can validate any file); only some have kernels (see kernels/cpu/type_traits.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace mnemo {

enum class DType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  IQ2_XXS = 16,
  IQ2_XS = 17,
  IQ3_XXS = 18,
  IQ1_S = 19,
  IQ4_NL = 20,
  IQ3_S = 21,
  IQ2_S = 22,
  IQ4_XS = 23,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  IQ1_M = 29,
  BF16 = 30,
  TQ1_0 = 34,
  TQ2_0 = 35,
  MXFP4 = 39,
};

struct DTypeInfo {
  std::string_view name;
  int64_t block_elems;  // elements per block (1 for plain types)
  size_t block_bytes;   // bytes per block
};

// nullopt for an id the format does not define.
std::optional<DTypeInfo> dtype_info(uint32_t id);
DTypeInfo dtype_info(DType type);
std::string_view dtype_name(DType type);

// Bytes of a row of n elements; n must be a multiple of the block size.
inline size_t row_bytes(DType type, int64_t n) {
  const DTypeInfo info = dtype_info(type);
  return static_cast<size_t>(n / info.block_elems) * info.block_bytes;
}

}  // namespace mnemo

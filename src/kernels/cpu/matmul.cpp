// matmul: quantise the activations once into the weight type's vec_dot_type, then give each
// thread a contiguous range of weight rows; every weight row is read once and dotted with all
// activation rows while it is in cache.
#include "kernels/cpu/matmul.h"

#include <cassert>
#include <cstring>

#include "kernels/cpu/type_kernels.h"

namespace mnemo::kernels {
namespace {

// Below this many multiply-adds, waking the pool costs more than it saves.
constexpr int64_t kMinParallelWork = 1 << 16;

}  // namespace

void matmul(const WeightMatrix& w, const float* x, int64_t n_rows, float* y, ThreadPool& pool,
            MatmulScratch& scratch) {
  if (n_rows <= 0 || w.out_features <= 0) return;
  const TypeKernels* weight_kernels = type_kernels(w.type);
  assert(weight_kernels != nullptr && weight_kernels->vec_dot != nullptr);
  const TypeKernels* activation_kernels = type_kernels(weight_kernels->vec_dot_type);
  const int64_t k = w.in_features;
  assert(k % dtype_info(weight_kernels->vec_dot_type).block_elems == 0);

  // F32 weights take the activations as they are.
  const uint8_t* activations = reinterpret_cast<const uint8_t*>(x);
  size_t activation_row_bytes = static_cast<size_t>(k) * sizeof(float);
  if (weight_kernels->vec_dot_type != DType::F32) {
    activation_row_bytes = row_bytes(weight_kernels->vec_dot_type, k);
    scratch.activations.resize(static_cast<size_t>(n_rows) * activation_row_bytes);
    for (int64_t r = 0; r < n_rows; ++r) {
      activation_kernels->quantize_activations(
          x + r * k, scratch.activations.data() + static_cast<size_t>(r) * activation_row_bytes, k);
    }
    activations = scratch.activations.data();
  }

  const size_t weight_row_bytes = w.row_bytes();
  const auto vec_dot = weight_kernels->vec_dot;
  const int64_t out = w.out_features;
  const auto rows = [&](int64_t begin, int64_t end, int) {
    for (int64_t o = begin; o < end; ++o) {
      const uint8_t* weight_row = w.data + static_cast<size_t>(o) * weight_row_bytes;
      for (int64_t r = 0; r < n_rows; ++r) {
        y[r * out + o] = vec_dot(k, weight_row, activations + static_cast<size_t>(r) * activation_row_bytes);
      }
    }
  };
  if (pool.size() == 1 || out * k * n_rows < kMinParallelWork) {
    rows(0, out, 0);
  } else {
    pool.parallel_for(out, rows);
  }
}

void dequantize_row(const WeightMatrix& w, int64_t index, float* out) {
  assert(index >= 0 && index < w.out_features);
  const TypeKernels* kernels = type_kernels(w.type);
  assert(kernels != nullptr);
  kernels->to_float(w.data + static_cast<size_t>(index) * w.row_bytes(), out, w.in_features);
}

}  // namespace mnemo::kernels

// Matrix products of a weight matrix (rows of a quantised type, read in place from the model
// file) with a batch of activation rows.
#pragma once

#include <cstdint>
#include <vector>

#include "tensor/dtype.h"
#include "util/thread_pool.h"

namespace mnemo::kernels {

struct WeightMatrix {
  DType type = DType::F32;
  int64_t in_features = 0;   // elements per row (contiguous)
  int64_t out_features = 0;  // number of rows
  const uint8_t* data = nullptr;
  size_t row_bytes() const { return ::mnemo::row_bytes(type, in_features); }
};

// Reusable per-caller buffer for the quantised activations (avoids allocation per call).
struct MatmulScratch {
  std::vector<uint8_t> activations;
};

// y[r * out_features + o] = dot(W[o], x[r * in_features ...]) for r < n_rows.
// Quantises x once, then splits the output rows across the pool.
void matmul(const WeightMatrix& w, const float* x, int64_t n_rows, float* y, ThreadPool& pool,
            MatmulScratch& scratch);

// Copies row `index` of W dequantised into out (embedding lookup).
void dequantize_row(const WeightMatrix& w, int64_t index, float* out);

}  // namespace mnemo::kernels

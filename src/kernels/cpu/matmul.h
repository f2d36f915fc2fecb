// Matrix products of a weight matrix (rows of a quantised type, read in place from the model
// file) with a batch of activation rows.
//
// Batch invariance: y[r][o] depends only on x's row r and W's row o, bit for bit: not on the
// other rows, their number, r's place among them, the other matrices of a matmul_many, or the
// number of threads (see gemm.h for how the kernels guarantee it; tests/kernels/
// batch_invariance_test.cpp checks it).
#pragma once

#include <cstdint>
#include <span>
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
  struct alignas(64) CacheLine {
    uint8_t bytes[64];
  };
  std::vector<CacheLine> activations;
};

// One product of a matmul_many: y[r * w->out_features + o].
struct MatmulTask {
  const WeightMatrix* w;
  float* y;
};

// y[r * out_features + o] = dot(W[o], x[r * in_features ...]) for r < n_rows.
// Quantises x once, then splits the output rows across the pool.
void matmul(const WeightMatrix& w, const float* x, int64_t n_rows, float* y, ThreadPool& pool,
            MatmulScratch& scratch);

// Several products of the same activations (e.g. Q, K and V of one normed input; every matrix
// has x's width): x is quantised once per activation format, and all products share one pass of
// the pool.
void matmul_many(std::span<const MatmulTask> tasks, const float* x, int64_t n_rows, ThreadPool& pool,
                 MatmulScratch& scratch);

// Copies row `index` of W dequantised into out (embedding lookup).
void dequantize_row(const WeightMatrix& w, int64_t index, float* out);

}  // namespace mnemo::kernels

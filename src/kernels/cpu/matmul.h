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

#include "kernels/cpu/gemm.h"
#include "tensor/dtype.h"
#include "util/anonymous_memory.h"
#include "util/thread_pool.h"

namespace mnemo::kernels {

struct WeightMatrix {
  DType type = DType::F32;
  int64_t in_features = 0;   // elements per row (contiguous)
  int64_t out_features = 0;  // number of rows
  const uint8_t* data = nullptr;
  // The rows repacked in the GEMM kernel's tile layout (prepack), or null.
  const uint8_t* tiles = nullptr;
  size_t row_bytes() const { return ::mnemo::row_bytes(type, in_features); }
};

struct alignas(64) CacheLine {
  uint8_t bytes[64];
};

// Reusable per-caller buffer for the quantised activations (avoids allocation per call).
struct MatmulScratch {
  std::vector<CacheLine> activations;
};

// A matrix's rows repacked once in its GEMM kernel's tile layout (move-only: the matrix points
// into it).
class PackedTiles {
 public:
  PackedTiles() = default;
  explicit PackedTiles(size_t bytes) : memory_(allocated_bytes(bytes)) {}
  // What holding `bytes` allocates: whole cache lines.
  static size_t allocated_bytes(size_t bytes) { return (bytes + sizeof(CacheLine) - 1) / sizeof(CacheLine) * sizeof(CacheLine); }
  PackedTiles(PackedTiles&&) = default;
  PackedTiles& operator=(PackedTiles&&) = default;
  PackedTiles(const PackedTiles&) = delete;
  PackedTiles& operator=(const PackedTiles&) = delete;

  uint8_t* data() { return memory_.data(); }
  const uint8_t* data() const { return memory_.data(); }
  size_t bytes() const { return memory_.size(); }

 private:
  AnonymousMemory memory_;  // page-aligned; huge pages where the kernel has them (streamed every step)
};

// Repacks w's rows once in the tile layout of its GEMM kernel on this ISA, when that kernel
// offers it, and points w.tiles there: batched products then skip the repacking every call
// otherwise does (worth it for a matrix every decode step multiplies, such as the output
// projection). Empty, and w unchanged, when the kernel does not offer it. The products are the
// same bits either way.
PackedTiles prepack(WeightMatrix& w);

// The bytes prepack(w) would allocate (0 where the kernel does not offer it).
size_t prepacked_bytes(const WeightMatrix& w);
// Whether every product of w reads its prepacked tiles, one activation row included; otherwise
// the one-row product keeps reading the file's rows (the tiles are larger than they are).
bool prepacked_tiles_replace_rows(const WeightMatrix& w);

// Rows of a product wanted only through their largest output (greedy decoding).
struct ArgmaxRows {
  std::span<const uint8_t> wanted;  // per activation row: non-zero = only its largest output
  // Per activation row, or empty: null, or the outputs that may count (a TokenMask's words,
  // util/token_mask.h): the largest of those alone.
  std::span<const uint64_t* const> masks;
  // Set by matmul: whether the kernel folded those rows' outputs into `lanes` (then their rows
  // of y are left untouched); otherwise every row of y was written.
  bool folded = false;
  // When folded: thread t's lanes of row r at lanes[t * n_rows + r], `sets` threads
  // (kernels/nn/argmax.h's argmax_of_lanes takes a row's sets to its index).
  std::vector<ArgmaxLanes> lanes;
  int32_t sets = 0;
  const ArgmaxLanes* row_lanes(int64_t row, int64_t n_rows, int32_t set) const {
    return &lanes[static_cast<size_t>(set * n_rows + row)];
  }
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
// The same, some rows wanted only through their largest output (see ArgmaxRows).
void matmul(const WeightMatrix& w, const float* x, int64_t n_rows, float* y, ThreadPool& pool,
            MatmulScratch& scratch, ArgmaxRows& argmax);

// Several products of the same activations (e.g. Q, K and V of one normed input; every matrix
// has x's width): x is quantised once per activation format, and all products share one pass of
// the pool.
void matmul_many(std::span<const MatmulTask> tasks, const float* x, int64_t n_rows, ThreadPool& pool,
                 MatmulScratch& scratch, ArgmaxRows* argmax = nullptr);  // argmax: one task only

// Copies row `index` of W dequantised into out (embedding lookup).
void dequantize_row(const WeightMatrix& w, int64_t index, float* out);

}  // namespace mnemo::kernels

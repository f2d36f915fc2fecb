// Batched matrix products ("GEMM" kernels): a range of weight rows, read in place from the model
// file, times a batch of activation rows packed once per call into the kernel's own layout.
// matmul (matmul.h) uses these where the ISA has them and falls back to vec_dot per element
// otherwise.
//
// Batch invariance (the serving engine depends on it): every output element is computed by the
// same sequence of operations whatever the number of activation rows, the row's place in the
// batch, the range of weight rows and the thread that runs it. The quantised kernels get there by
// putting 16 *weight rows* in the 16 lanes of a vector: each lane computes one output element
// from exact integer block sums and one float accumulation chain over the blocks, so nothing
// about the other rows of either operand can change its result. The float kernels keep one
// accumulator vector per (weight row, activation row) pair and reduce it with a fixed tree.
//
// Chosen once at start-up through the dispatch table like the per-type kernels; there are none
// for the scalar variant and, on AVX2, none for the float types (matmul then
// calls vec_dot per element, which is invariant by construction).
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>

#include "kernels/cpu/type_kernels.h"
#include "tensor/dtype.h"

namespace mnemo::kernels {

// How activations are packed for a family of kernels (all weight types with the same
// vec_dot_type share one packer, so Q, K and V can share the packed rows).
struct ActivationPacker {
  // Bytes of a batch of n_rows packed rows of k elements (a multiple of 64).
  size_t (*batch_bytes)(int64_t k, int64_t n_rows);
  // Packs x[0, k) as row `row` of a batch of n_rows at `batch` (64-byte aligned). A row writes
  // only its own bytes, so the rows of a batch can be packed in any order and in parallel. The
  // values are those of the vec_dot_type's quantize_activations on the same ISA; the layout is
  // the kernel's own.
  void (*pack)(const float* x, int64_t k, int64_t row, int64_t n_rows, void* batch);
};

// What a thread has seen of one activation row's largest output: per lane of 16, the largest
// value (NaN never counts, +inf counts as the largest float) and its output index, the lowest on
// a tie. Greedy decoding wants nothing else of the output projection's 262,144 outputs per row,
// and skipping their store and the argmax pass over them is worth ~5% of a batch-32 step.
struct alignas(64) ArgmaxLanes {
  float value[16];
  int32_t index[16];
  void clear() {
    for (int l = 0; l < 16; ++l) {
      value[l] = -std::numeric_limits<float>::infinity();
      index[l] = 0;
    }
  }
};

struct GemmArgs {
  const uint8_t* weights;  // row 0 of the matrix
  size_t weight_row_bytes;
  // The matrix's rows repacked once in the kernel's tile layout (GemmKernel::pack_tile, tile t =
  // rows t x tile_rows.. at t x tile_bytes(k)), or null: then each call repacks the tiles it
  // multiplies. Read only when row_begin is a multiple of tile_rows (matmul's always are).
  const uint8_t* tiles;
  int64_t k;                          // elements per row
  int64_t row_begin, row_end;         // the weight rows (output features) to compute
  const uint8_t* activations;         // a batch of n_rows rows packed by the kernel's packer
  int64_t n_rows;
  float* y;  // y[r * y_stride + o] for o in [row_begin, row_end), r < n_rows
  int64_t y_stride;
  // The caller's next call is likely to continue at row_end up to here (ThreadPool::
  // parallel_shares), so the kernel may fetch those rows' weights ahead; at most row_end means
  // nothing beyond the range. Within the matrix.
  int64_t stream_row_end = 0;
  // Rows wanted only through their largest output (argmax_rows[r] != 0; null: none): their
  // outputs are folded into argmax_lanes[r] (this thread's) instead of being written to y.
  const uint8_t* argmax_rows = nullptr;
  ArgmaxLanes* argmax_lanes = nullptr;
  // Per activation row (null: none): a TokenMask's words (util/token_mask.h); a folded row's
  // outputs outside its mask never count.
  const uint64_t* const* argmax_masks = nullptr;
};

struct GemmKernel {
  const ActivationPacker* packer;
  // Work is split in multiples of this many weight rows (matmul always does).
  int32_t tile_rows;
  void (*multiply)(const GemmArgs& args);
  // Repacking once at load (null where the kernel does not offer it): the bytes of one tile of
  // rows of k elements, and the packing of rows [first_row, min(first_row + tile_rows, n_rows))
  // into `out` (64-byte aligned). The products are the same bits with or without it.
  size_t (*tile_bytes)(int64_t k) = nullptr;
  void (*pack_tile)(const uint8_t* weights, size_t row_bytes, int64_t k, int64_t first_row, int64_t n_rows,
                    uint8_t* out) = nullptr;
  // Whether a single activation row reads the tiles too. Where they are larger than the file's
  // rows it reads the rows (a one-row product is bound by the bytes it reads), so both stay in
  // memory; where not, the file's pages of the matrix can be given back.
  bool one_row_reads_tiles = false;
  // Whether multiply honours GemmArgs::argmax_rows (otherwise it writes every row to y).
  bool folds_argmax = false;
};

// For the weight type on the detected ISA, or on `isa`; nullptr when there is none.
const GemmKernel* gemm_kernel(DType type);
const GemmKernel* gemm_kernel(DType type, Isa isa);

}  // namespace mnemo::kernels

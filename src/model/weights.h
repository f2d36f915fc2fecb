// The tensors of a model, used in place from the mapped GGUF. Shapes and types are validated at
// load time against the config, so the forward pass never checks them.
#pragma once

#include <vector>

#include "gguf/gguf_file.h"
#include "kernels/cpu/matmul.h"
#include "model/config.h"
#include "model/tensor_shard.h"
#include "util/result.h"

namespace mnemo {

using kernels::WeightMatrix;

// Norm weights and biases are small: kept as owned float vectors whatever their file type.
using Vector = std::vector<float>;

// Q, K and V (and gate and up) are views of rows when the file fuses them in one tensor
// (Phi-3's attn_qkv and ffn_up): each product still reads only its own rows.
struct LayerWeights {
  Vector attn_norm;
  WeightMatrix wq, wk, wv, wo;
  Vector bq, bk, bv, bo;        // biases, each empty unless the file has it (Qwen 2: Q/K/V)
  Vector q_norm, k_norm;        // empty unless QK-norm
  Vector post_attn_norm;        // empty unless post-norms
  Vector ffn_norm;
  WeightMatrix w_gate, w_up, w_down;
  Vector b_gate, b_up, b_down;  // empty unless the file has them (Granite, Mistral 3 may)
  Vector post_ffn_norm;
};

struct ModelWeights {
  WeightMatrix token_embedding;  // [n_vocab rows of n_embd]
  Vector output_norm;
  WeightMatrix output;           // the embedding itself when tied
  // Matrices whose rows were repacked at load in their GEMM kernel's tiles (their .tiles point
  // into these; see LoadOptions::prepack_budget_bytes), and the memory that took beyond the
  // file's mapping.
  std::vector<kernels::PackedTiles> packed_tiles;
  size_t prepacked_extra_bytes = 0;
  // Optional per-dimension-pair divisors of the RoPE frequency: rope_freqs (Llama 3), or LongRoPE's
  // long set when the context served (the model's context length) exceeds the original one,
  // else its short set (Phi-3), as llama.cpp chooses them.
  Vector rope_freq_factors;
  TensorShard shard;             // the heads and FFN rows these layers hold (all of them unless sliced)
  std::vector<std::vector<uint8_t>> sliced;  // column slices' bytes (the matrices point into them)
  std::vector<LayerWeights> layers;
};

struct LoadOptions {
  // Batched products (decode batches, prefill chunks) repack each tile of weight rows into the
  // GEMM kernel's layout on every call, unless the matrix was repacked once at load. That costs
  // memory where the one-row product still reads the file's rows (the 4-, 5- and 6-bit formats,
  // whose tiles hold 8-bit levels); this bounds the memory beyond the file's mapping. Matrices
  // are taken in order, the output projection first, each one that still fits. The products are
  // the same bits either way.
  size_t prepack_budget_bytes = size_t{1} << 30;
  // The layers this process runs, [layer_begin, layer_end) (layer_end -1: through the last): a
  // pipeline stage loads and prepacks only its own (the rest stay empty), the coordinator of a
  // pipeline none. `head`: the embedding lookup and the output projection run here (prepacked).
  int32_t layer_begin = 0;
  int32_t layer_end = -1;
  bool head = true;
  // Tensor parallelism: this process holds rank tensor_rank of tensor_ranks' share of each of its
  // layers (model/tensor_shard.h); 1: whole layers.
  int32_t tensor_rank = 0;
  int32_t tensor_ranks = 1;
  // The norms of the layers outside the range too (a tensor-parallel coordinator applies them
  // between the workers' shares).
  bool layer_norms = false;
};

Result<ModelWeights> load_weights(const gguf::File& file, const ModelConfig& config, const LoadOptions& options = {});

}  // namespace mnemo

// The tensors of a model, used in place from the mapped GGUF. Shapes and types are validated at
// load time against the config, so the forward pass never checks them.
#pragma once

#include <vector>

#include "gguf/gguf_file.h"
#include "kernels/cpu/matmul.h"
#include "model/config.h"
#include "util/result.h"

namespace mnemo {

using kernels::WeightMatrix;

// Norm weights and biases are small: kept as owned float vectors whatever their file type.
using Vector = std::vector<float>;

struct LayerWeights {
  Vector attn_norm;
  WeightMatrix wq, wk, wv, wo;
  Vector bq, bk, bv;            // empty unless the architecture has QKV bias
  Vector q_norm, k_norm;        // empty unless QK-norm
  Vector post_attn_norm;        // empty unless post-norms
  Vector ffn_norm;
  WeightMatrix w_gate, w_up, w_down;
  Vector post_ffn_norm;
};

struct ModelWeights {
  WeightMatrix token_embedding;  // [n_vocab rows of n_embd]
  Vector output_norm;
  WeightMatrix output;           // the embedding itself when tied
  // The output projection runs for every sequence of every decode step: its rows are repacked
  // once here when the GEMM kernel offers it (output.tiles points in).
  kernels::PackedTiles output_tiles;
  Vector rope_freq_factors;      // optional per-dimension-pair divisors of the RoPE frequency
  std::vector<LayerWeights> layers;
};

Result<ModelWeights> load_weights(const gguf::File& file, const ModelConfig& config);

}  // namespace mnemo

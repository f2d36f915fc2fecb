// A tensor-parallel worker's share of a model (SPEC P10, V7): rank r of n holds a range of the
// query heads, the KV heads those use, and a range of the feed-forward's rows; its weights are
// slices of the file's (Q, K, V, gate and up: their rows; the output and down projections: their
// columns, repacked at load). Every shard's output projections sum to the layer's.
//
// Heads split on KV-group boundaries while there are at least as many KV heads as ranks (each
// rank a contiguous range of whole groups: SmolLM2's 3 groups of 3 query heads over 2 ranks are
// 6 and 3 query heads), and within a group otherwise, its KV head then held by every rank that
// uses it (Gemma 3 270M's single KV head on both of 2 ranks, 2 query heads each). So within a
// rank every KV head serves the same number of query heads, as the attention kernel assumes.
// A split the format's blocks cannot follow (a column range that is not whole blocks) is refused.
#pragma once

#include <cstdint>
#include <vector>

#include "model/config.h"
#include "util/result.h"

namespace mnemo {

struct TensorShard {  // the whole model: rank 0 of 1
  int32_t rank = 0;
  int32_t ranks = 1;
  int32_t q_begin = 0, q_end = 0;    // query heads
  int32_t kv_begin = 0, kv_end = 0;  // KV heads
  int32_t ff_begin = 0, ff_end = 0;  // feed-forward rows
};

// Rank `rank` of `ranks`' heads and rows, the FFN's split on multiples of `ff_unit` rows (the
// down projection's block, so its column slices are whole blocks); an error if the model's
// heads cannot split so.
Result<TensorShard> tensor_shard(const ModelConfig& config, int32_t rank, int32_t ranks, int32_t ff_unit = 1);

// The shard's view of the config: its heads and FFN rows.
ModelConfig shard_config(const ModelConfig& config, const TensorShard& shard);

struct ModelWeights;
// Replaces layers [layer_begin, layer_end)'s matrices and biases with the shard's slices; the
// repacked column slices' bytes go into weights.sliced. An error, naming the tensor, for a
// column range that is not whole blocks of its format.
Status slice_for_shard(const ModelConfig& config, const TensorShard& shard, int32_t layer_begin, int32_t layer_end,
                       ModelWeights& weights);

}  // namespace mnemo

// A plain, unpaged, one-sequence forward pass: contiguous KV, attention with an explicit score
// matrix and an ordinary softmax. The paged, batched forward must match it (tests/model/).
// It shares the weight matrix products and element-wise ops with the real path (those have
// their own tests) and writes everything that concerns sequences, positions, masks and the
// cache out in the simplest form. With an F16 pool, K, V and Q are rounded through F16 as the
// paged path does.
#pragma once

#include <span>
#include <vector>

#include "model/model.h"
#include "util/thread_pool.h"

namespace mnemo::testing {

// Logits [tokens.size() x n_vocab] for positions 0 .. tokens.size() - 1.
std::vector<float> reference_forward(const Model& model, std::span<const TokenId> tokens, DType kv_dtype,
                                     ThreadPool& pool);

}  // namespace mnemo::testing

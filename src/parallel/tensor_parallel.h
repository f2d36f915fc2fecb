// The coordinator's side of tensor parallelism (SPEC P10, V7): every layer's attention and
// feed-forward split across `mnemo worker` ranks (model/tensor_shard.h: each a range of the
// query heads with the KV heads they use, and of the FFN's rows), the coordinator keeping the
// embedding, the norms, the residual stream and the output.
//
//   per layer, per block (attention, then FFN):
//     h = norm(x) ──tensor rows──▶ every rank ──its share of the block's output──▶ coordinator
//     x += post_norm(share_0 + share_1 + ...)        (summed in rank order)
//
// Two all-reduces a layer, each one round trip to every rank; the KV pool is partitioned by KV
// head (a rank holds its heads of every block; one KV head may be on several ranks). The sum's
// order of additions differs from one instance's single dot product, so the logits are inside
// a rounding's distance of one instance's, not bit-identical (tests/model/tensor_shard_test.cpp
// and tests/parallel/tensor_parallel_test.cpp).
//
// Failure behaviour: connect() fails, naming the rank, if a worker cannot be reached or refuses
// its setup (another model; heads that cannot split so). Each rank's KV heads are replicated on
// the next rank after every pass (before it answers the pass's last attention). When a step
// fails (a rank reports an error or does not answer within step_timeout_seconds), a rank that
// does not answer a ping is replaced by a spare, its KV restored (parallel/replace_lost.h), and
// the whole pass runs again from its input; otherwise, without a spare, or with two ranks lost,
// the pass fails and its requests end with an error.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "parallel/sharded_coordinator.h"

namespace mnemo::parallel {

struct TensorParallelOptions {
  std::vector<std::string> workers;  // in rank order
  std::string host = "127.0.0.1";    // where this coordinator's link listens for the shares
  std::string cluster_secret;        // empty: unsigned, loopback only
  std::vector<std::string> spares;   // workers that replace a lost rank, in order
  // More candidates when those run out (the workers registered in the cluster); null: none.
  std::function<std::vector<std::string>()> more_spares;
  double setup_timeout_seconds = 300;
  double step_timeout_seconds = 120;
  double ping_timeout_seconds = 3;
};

// The coordinator's KV cache reaches the ranks' blocks through it too (ShardedCoordinator).
class TensorParallel : public ShardedCoordinator {
 public:
  // `model`: the coordinator's, loaded with no layers but their norms (LoadOptions layer_end 0,
  // layer_norms); the ranks are set up for `model_path` and a pool of `n_blocks` blocks.
  static Result<std::unique_ptr<TensorParallel>> connect(const std::string& model_path, const Model& model,
                                                         int32_t block_size, DType kv_dtype, int32_t n_blocks,
                                                         const TensorParallelOptions& options);

  Status run_layers(const Batch& batch, std::span<float> x) override;

 private:
  // The ranks keep one another's KV only when a spare could need it.
  TensorParallel(const Model& model, const TensorParallelOptions& options)
      : ShardedCoordinator(options.workers, {options.spares, options.more_spares},
                           {options.ping_timeout_seconds, options.setup_timeout_seconds, options.step_timeout_seconds},
                           !options.spares.empty() || options.more_spares != nullptr),
        model_(model),
        options_(options) {}
  Status run_pass(const Batch& batch, std::span<float> x);
  // Sends the pass's frame (its rows: the block's normed input) to every rank as layer il's
  // block `part`, and leaves the ranks' shares summed in `sum`.
  Status all_reduce(StageFrame& frame, int32_t il, uint8_t part, std::vector<float>& sum);

  const Model& model_;
  const TensorParallelOptions options_;
};

}  // namespace mnemo::parallel

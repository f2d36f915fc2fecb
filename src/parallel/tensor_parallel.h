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
#include <mutex>
#include <string>
#include <vector>

#include "kv/remote_device.h"
#include "model/model.h"
#include "parallel/replace_lost.h"
#include "parallel/stage_link.h"
#include "parallel/step_answers.h"
#include "parallel/worker_blocks.h"

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

// The coordinator's KV cache reaches the ranks' blocks through it too (kv/remote_device.h,
// parallel/worker_blocks.h), each operation retried once a lost rank is replaced.
class TensorParallel : public LayerRunner, public RemoteDevice {
 public:
  // `model`: the coordinator's, loaded with no layers but their norms (LoadOptions layer_end 0,
  // layer_norms); the ranks are set up for `model_path` and a pool of `n_blocks` blocks.
  static Result<std::unique_ptr<TensorParallel>> connect(const std::string& model_path, const Model& model,
                                                         int32_t block_size, DType kv_dtype, int32_t n_blocks,
                                                         const TensorParallelOptions& options);
  ~TensorParallel() override;

  Status run_layers(const Batch& batch, std::span<float> x) override;
  Status pull(std::span<const BlockId> blocks, KvStorage& into) override;
  Status push(std::span<const BlockId> blocks, const KvStorage& from) override;
  Status copy(std::span<const std::pair<BlockId, BlockId>> copies) override;
  // The ranks' endpoints now (a replaced rank's spare in its place), and how many were replaced.
  std::vector<std::string> ranks() const;
  int replacements() const;

 private:
  TensorParallel(const Model& model, TensorParallelOptions options)
      : model_(model), options_(options), workers_(options.workers), spares_{options.spares, options.more_spares} {}
  Status run_pass(const Batch& batch, std::span<float> x);
  bool has_spares() const { return !spares_.given.empty() || spares_.more != nullptr; }
  // Replaces the one rank that does not answer a ping with a spare (parallel/replace_lost.h).
  Status repair(const Error& failure);
  Status with_repair(const std::function<Status()>& op) {
    return run_repairing(workers_.size(), op, [this](const Error& e) { return repair(e); });
  }
  WorkerGroup group() { return {*link_, answers_, workers_, shares_, has_spares(), options_.step_timeout_seconds}; }
  // Sends the pass's frame (its rows: the block's normed input) to every rank as layer il's
  // block `part`, and leaves the ranks' shares summed in `sum`.
  Status all_reduce(StageFrame& frame, int32_t il, uint8_t part, std::vector<float>& sum);

  const Model& model_;
  const TensorParallelOptions options_;
  std::vector<std::string> workers_;  // engine thread; copied for other readers under ranks_mutex_
  std::vector<StageSetup> setups_;
  std::vector<KvShare> shares_;  // by rank: every layer, its KV heads
  Spares spares_;
  int replacements_ = 0;
  mutable std::mutex ranks_mutex_;
  StepAnswers answers_;
  std::unique_ptr<StageLink> link_;  // last: its thread calls answers_
};

}  // namespace mnemo::parallel

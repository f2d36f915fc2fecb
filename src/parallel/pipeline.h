// The coordinator's side of pipeline parallelism (SPEC D6): the model's layers run on stage
// workers (stage_worker.h), contiguous ranges of them, while the coordinator keeps the
// embedding, the output projection, the engine (scheduling, sampling) and the KV cache's
// bookkeeping. Block ids are the coordinator's; each stage holds its layers' slice of every
// block, so the prefix index, block tables and drops (recomputation) work as on one instance.
//
// A forward pass's batch is cut into microbatches (contiguous groups of sequences of about
// equal tokens), sent one after another to the first stage; each stage runs them in order and
// sends each on, so while stage 1 runs microbatch 0 stage 0 runs microbatch 1 (every stage busy
// once the pipeline fills). The rows come back to the coordinator's own link; the pass goes on
// when every microbatch has. Every operation is per token, so the logits are those of one
// instance bit for bit (batch invariance; tests/model/stage_forward_test.cpp).
//
// Failure behaviour: connect() fails, naming the stage, if a stage cannot be reached or refuses
// its setup. With two stages or more, each stage's KV is replicated on the next (stage_worker.h).
// When a pass fails (a stage reports an error, cannot be reached, or a microbatch does not come
// back within step_timeout_seconds), the coordinator pings the stages; one that does not answer
// is replaced by a spare (PipelineOptions::spares, then more_spares; a spare that does not take
// the setup is passed over), restored from its replica, and the pass runs again, so its
// requests go on as if nothing happened. Without a spare, or with no stage lost,
// or two lost at once, the pass fails and its requests end with an error. Answers of an earlier,
// failed pass are dropped.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "parallel/sharded_coordinator.h"

namespace mnemo::parallel {

struct PipelineOptions {
  std::vector<std::string> stages;  // the workers' endpoints ("host:port"), in layer order
  std::string host = "127.0.0.1";   // where this coordinator's link listens for the results
  std::string cluster_secret;       // empty: unsigned, loopback only
  std::vector<std::string> spares;  // workers that replace a lost stage, in order
  // More candidates when those run out, asked at each loss (the workers registered in the
  // cluster's membership now); the stages in use are skipped. Null: none.
  std::function<std::vector<std::string>()> more_spares;
  int32_t microbatches = 0;         // per pass, at most; 0: one per stage
  double setup_timeout_seconds = 300;
  double step_timeout_seconds = 120;
  double ping_timeout_seconds = 3;
};

// Layers [begin, end) of each of `stages` stages: contiguous, in order, as even as they go (the
// first n_layers % stages stages take one more).
std::vector<std::pair<int32_t, int32_t>> split_layers(int32_t n_layers, int32_t stages);
// The batch's sequences cut into at most `parts` contiguous groups [first, end) of about equal
// tokens, none empty.
std::vector<std::pair<size_t, size_t>> split_microbatches(const Batch& batch, int32_t parts);

// The coordinator's KV cache reaches the stages' blocks through the pipeline (ShardedCoordinator).
class Pipeline : public ShardedCoordinator {
 public:
  // Sets every stage up for `model_path`'s layers and a pool of `n_blocks` blocks of the layout.
  static Result<std::unique_ptr<Pipeline>> connect(const std::string& model_path, const Model& model,
                                                   int32_t block_size, DType kv_dtype, int32_t n_blocks,
                                                   const PipelineOptions& options);

  Status run_layers(const Batch& batch, std::span<float> x) override;
  const std::vector<StageSetup>& stage_setups() const { return setups_; }

 private:
  // Each stage's KV is replicated on the next once there are two.
  explicit Pipeline(const PipelineOptions& options)
      : ShardedCoordinator(options.stages, {options.spares, options.more_spares},
                           {options.ping_timeout_seconds, options.setup_timeout_seconds, options.step_timeout_seconds},
                           options.stages.size() > 1),
        options_(options) {}
  Status run_pass(const Batch& batch, std::span<float> x);

  const PipelineOptions options_;
};

}  // namespace mnemo::parallel

// The coordinator's end of kv/remote_device.h: its KV cache's device tier is its workers' (each
// holds a share of every block: a pipeline stage its layers, a tensor rank its KV heads), so a
// pull gathers every share of the blocks into the cache's staging storage, a push scatters them
// back to the workers (each on to its replica holder too, as a pass's KV is), and a copy runs on
// every worker and the replicas it holds. Frames stay under kMaxKvFrameBytes; each operation is
// one step of the coordinator's StepAnswers, every worker's answers awaited. Used by both
// coordinators (parallel/pipeline.h, parallel/tensor_parallel.h), on the engine thread.
#pragma once

#include <span>
#include <string>
#include <utility>
#include <vector>

#include "kv/kv_storage.h"
#include "parallel/stage_link.h"
#include "parallel/step_answers.h"
#include "parallel/token_kv.h"

namespace mnemo::parallel {

struct WorkerGroup {
  StageLink& link;
  StepAnswers& answers;
  const std::vector<std::string>& workers;
  const std::vector<KvShare>& shares;  // by worker
  bool replicate = false;               // pushes go on to the next worker, which keeps the replica
  double timeout_seconds = 120;
};

// Pulls read from the fewest workers that hold every head (a KV head on several tensor ranks
// comes from the first).
Status pull_blocks(const WorkerGroup& group, std::span<const BlockId> blocks, KvStorage& into);
Status push_blocks(const WorkerGroup& group, std::span<const BlockId> blocks, const KvStorage& from);
Status copy_blocks(const WorkerGroup& group, std::span<const std::pair<BlockId, BlockId>> copies);

}  // namespace mnemo::parallel

// What both coordinators of model parallelism share (parallel/pipeline.h: stages,
// parallel/tensor_parallel.h: tensor ranks): their workers' endpoints (a lost worker's spare in
// its place), setups and KV shares; the link they talk over and the answers they wait for;
// replacing a lost worker (parallel/replace_lost.h) and running a step again once it is; and
// being the KV cache's device (kv/remote_device.h): pulls, pushes and copies of the workers'
// blocks (parallel/worker_blocks.h), each retried once a lost worker is replaced. The engine
// thread runs everything here but workers() and replacements().
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

class ShardedCoordinator : public LayerRunner, public RemoteDevice {
 public:
  ~ShardedCoordinator() override;

  Status pull(std::span<const BlockId> blocks, KvStorage& into) override;
  Status push(std::span<const BlockId> blocks, const KvStorage& from) override;
  Status copy(std::span<const std::pair<BlockId, BlockId>> copies) override;

  // The workers' endpoints now (a replaced one's spare in its place), and how many were replaced.
  // Thread-safe.
  std::vector<std::string> workers() const;
  int replacements() const;

 protected:
  // `replicate`: the workers keep one another's KV (pushes are replicated as passes are).
  ShardedCoordinator(std::vector<std::string> workers, Spares spares, ReplaceTimeouts timeouts, bool replicate)
      : workers_(std::move(workers)), spares_(std::move(spares)), timeouts_(timeouts), replicate_(replicate) {}
  // The link the workers answer on; its progress thread hands their frames to answers_.
  Status listen(const std::string& host, const std::string& cluster_secret);
  // Runs `op` until it succeeds, replacing the lost worker after each failure (at most once per
  // worker): a step a replacement mends runs again.
  Status with_repair(const std::function<Status()>& op);
  bool replicates() const { return replicate_; }

  std::vector<std::string> workers_;  // engine thread; copied for other threads under mutex_
  std::vector<StageSetup> setups_;    // by worker
  std::vector<KvShare> shares_;       // by worker
  StepAnswers answers_;
  std::unique_ptr<StageLink> link_;   // reset first at destruction: its thread calls answers_

 private:
  // Replaces the one worker that does not answer a ping with a spare.
  Status repair(const Error& failure);
  WorkerGroup group();

  Spares spares_;
  const ReplaceTimeouts timeouts_;
  const bool replicate_;
  int replacements_ = 0;
  mutable std::mutex mutex_;  // workers_ and replacements_, for the readers on other threads
};

}  // namespace mnemo::parallel

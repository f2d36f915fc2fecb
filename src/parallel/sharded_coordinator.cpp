#include "parallel/sharded_coordinator.h"

namespace mnemo::parallel {

ShardedCoordinator::~ShardedCoordinator() { link_.reset(); }

Status ShardedCoordinator::listen(const std::string& host, const std::string& cluster_secret) {
  StageLink::Options options;
  options.cluster_secret = cluster_secret;
  MNEMO_ASSIGN_OR_RETURN(link_, StageLink::listen(host, 0, [this](StageFrame&& f) { return answers_.take(std::move(f)); }, options));
  return ok_status();
}

std::vector<std::string> ShardedCoordinator::workers() const {
  std::lock_guard lock(mutex_);
  return workers_;
}

int ShardedCoordinator::replacements() const {
  std::lock_guard lock(mutex_);
  return replacements_;
}

Status ShardedCoordinator::with_repair(const std::function<Status()>& op) {
  return run_repairing(workers_.size(), op, [this](const Error& e) { return repair(e); });
}

Status ShardedCoordinator::repair(const Error& failure) {
  std::vector<std::string> workers = workers_;
  MNEMO_ASSIGN_OR_RETURN(const size_t lost, replace_lost_worker(*link_, answers_, workers, setups_, spares_, timeouts_, failure));
  std::lock_guard lock(mutex_);
  workers_[lost] = workers[lost];
  ++replacements_;
  return ok_status();
}

WorkerGroup ShardedCoordinator::group() { return {*link_, answers_, workers_, shares_, replicate_, timeouts_.step_seconds}; }

Status ShardedCoordinator::pull(std::span<const BlockId> blocks, KvStorage& into) {
  return with_repair([&] { return pull_blocks(group(), blocks, into); });
}

Status ShardedCoordinator::push(std::span<const BlockId> blocks, const KvStorage& from) {
  return with_repair([&] { return push_blocks(group(), blocks, from); });
}

Status ShardedCoordinator::copy(std::span<const std::pair<BlockId, BlockId>> copies) {
  return with_repair([&] { return copy_blocks(group(), copies); });
}

}  // namespace mnemo::parallel

#include "parallel/replace_lost.h"

#include <algorithm>
#include <cstdio>

namespace mnemo::parallel {
namespace {

// The next spare that takes `setup`, off spares.given or spares.more (skipping `workers`).
Result<std::string> set_up_spare(StageLink& link, const std::vector<std::string>& workers, const StageSetup& setup, Spares& spares,
                                 double timeout_seconds) {
  if (spares.given.empty() && spares.more) {
    for (const std::string& candidate : spares.more()) {
      if (std::find(workers.begin(), workers.end(), candidate) == workers.end()) spares.given.push_back(candidate);
    }
  }
  StageFrame frame;
  frame.kind = StageFrameKind::kSetup;
  frame.setup = setup;
  std::string refusals;
  while (!spares.given.empty()) {
    const std::string spare = spares.given.front();
    spares.given.erase(spares.given.begin());
    const Status set_up = link.send(spare, frame, timeout_seconds);
    if (set_up.ok()) return spare;
    refusals += fmt::format("; spare {}: {}", spare, set_up.error().message());
  }
  return make_error("no spare took its place{}", refusals.empty() ? std::string("; 0 spares") : refusals);
}

// Asks workers[holder] to send `setup`'s KV (its own, or the replica it keeps) to `spare`.
Status restore_onto(StageLink& link, StepAnswers& answers, const std::string& spare, const std::string& holder,
                    const StageSetup& setup, bool from_replica, const ReplaceTimeouts& timeouts) {
  StageFrame restore;
  restore.kind = StageFrameKind::kRestore;
  restore.step = answers.begin();
  restore.route = {spare, link.endpoint()};
  restore.kv.layer_begin = setup.layer_begin;
  restore.kv.layer_end = setup.layer_end;
  restore.kv.replica = from_replica;
  const Status sent = link.send(holder, restore, timeouts.step_seconds);
  if (!sent.ok()) return make_error("restore from {}: {}", holder, sent.error().message());
  return answers.await(1, timeouts.setup_seconds, "restore");
}

}  // namespace

Status run_repairing(size_t max_repairs, const std::function<Status()>& op, const std::function<Status(const Error&)>& repair) {
  for (size_t repaired = 0;; ++repaired) {
    const Status status = op();
    if (status.ok() || repaired == max_repairs) return status;
    MNEMO_RETURN_IF_ERROR(repair(status.error()));
  }
}

Result<size_t> replace_lost_worker(StageLink& link, StepAnswers& answers, std::vector<std::string>& workers,
                                   const std::vector<StageSetup>& setups, Spares& spares, const ReplaceTimeouts& timeouts,
                                   const Error& failure) {
  const size_t n = workers.size();
  std::vector<size_t> lost;
  StageFrame ping;
  ping.kind = StageFrameKind::kPing;
  for (size_t i = 0; i < n; ++i) {
    if (!link.send(workers[i], ping, timeouts.ping_seconds).ok()) lost.push_back(i);
  }
  if (lost.empty()) return failure;  // every worker lives: not a failure a replacement mends
  if (lost.size() > 1 || n < 2) {
    return make_error("{} (workers lost: {} of {}; a worker is restored from its replica on the next, so one of two or "
                      "more can be replaced at a time)",
                      failure.message(), lost.size(), n);
  }
  const size_t i = lost[0];
  auto spare = set_up_spare(link, workers, setups[i], spares, timeouts.setup_seconds);
  if (!spare.ok()) return make_error("{} (worker {} lost: {})", failure.message(), i, spare.error().message());
  const size_t next = (i + 1) % n;
  const size_t before = (i + n - 1) % n;
  MNEMO_RETURN_IF_ERROR(restore_onto(link, answers, *spare, workers[next], setups[i], true, timeouts));
  MNEMO_RETURN_IF_ERROR(restore_onto(link, answers, *spare, workers[before], setups[before], false, timeouts));
  std::fprintf(stderr, "mnemo: worker %zu (%s) lost: %s; replaced by %s, its KV restored from the replica on %s\n", i,
               workers[i].c_str(), failure.message().c_str(), spare->c_str(), workers[next].c_str());
  workers[i] = *spare;
  return i;
}

}  // namespace mnemo::parallel

// Replacing a lost worker (SPEC D7), shared by both coordinators: a pipeline's stages and a
// tensor-parallel group's ranks keep their KV replicated in a ring (worker i's on worker i + 1,
// the last's on the first). When a step fails, the coordinator pings its workers; if exactly
// one of two or more does not answer, the first spare that takes its setup gets the lost
// worker's KV from its replica on the next worker, and the replica the lost worker held, of the
// worker before it, from that worker itself. The coordinator then runs the step again: nothing
// the lost worker had computed is computed again.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "parallel/stage_link.h"
#include "parallel/step_answers.h"
#include "util/result.h"

namespace mnemo::parallel {

struct Spares {
  std::vector<std::string> given;                               // taken in order
  std::function<std::vector<std::string>()> more = nullptr;     // asked when `given` runs out
};

struct ReplaceTimeouts {
  double ping_seconds = 3;
  double setup_seconds = 300;
  double step_seconds = 120;
};

// After `failure`: replaces the one lost worker of `workers` (set up with `setups`, by index) and
// returns its index, the spare's endpoint in its place. An error, with `failure`'s message, when
// every worker answers (not a failure a replacement mends), when more than one is lost or there
// is one worker only, or when no spare takes the place.
// Runs `op` until it succeeds; after a failure, `repair` replaces a lost worker (its error, or a
// failure after `max_repairs` repairs, is returned): a step a replacement mends runs again.
Status run_repairing(size_t max_repairs, const std::function<Status()>& op, const std::function<Status(const Error&)>& repair);

Result<size_t> replace_lost_worker(StageLink& link, StepAnswers& answers, std::vector<std::string>& workers,
                                   const std::vector<StageSetup>& setups, Spares& spares, const ReplaceTimeouts& timeouts,
                                   const Error& failure);

}  // namespace mnemo::parallel

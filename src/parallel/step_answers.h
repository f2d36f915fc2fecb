// What a coordinator (parallel/pipeline.h, parallel/tensor_parallel.h) waits for: the answers
// to its current step (rows, a restore's end, KV pulled, a push or copy done, a worker's error), which arrive on its link's
// progress thread, while the engine thread waits. Answers to another step (one that failed) are
// dropped. Thread-safe.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>

#include "parallel/stage_frame.h"
#include "util/result.h"

namespace mnemo::parallel {

class StepAnswers {
 public:
  // A new step, with nothing arrived and no failure; its id.
  uint64_t begin();
  // The link's handler: keeps rows, kv (a pull's) and restored frames of the current step by
  // their microbatch (or rank, or request), and the first error; refuses other kinds.
  Status take(StageFrame&& frame);
  // Until `count` answers are in (OK), a worker reported an error, or the timeout passes.
  Status await(size_t count, double timeout_seconds, std::string_view what);
  // The current step's answers, taken.
  std::map<uint32_t, StageFrame> take_arrived();

 private:
  std::mutex mutex_;
  std::condition_variable arrived_cv_;
  uint64_t step_ = 0;
  std::map<uint32_t, StageFrame> arrived_;
  std::string failure_;
};

}  // namespace mnemo::parallel

#include "parallel/step_answers.h"

#include <chrono>

namespace mnemo::parallel {

uint64_t StepAnswers::begin() {
  std::lock_guard lock(mutex_);
  arrived_.clear();
  failure_.clear();
  return ++step_;
}

Status StepAnswers::take(StageFrame&& frame) {
  std::lock_guard lock(mutex_);
  if (frame.step != step_) return ok_status();  // an earlier step's, which failed: dropped
  switch (frame.kind) {
    case StageFrameKind::kError:
      if (failure_.empty()) failure_ = frame.error;
      break;
    case StageFrameKind::kRows:
    case StageFrameKind::kRestored:
    case StageFrameKind::kKv:  // a pull's answer
      arrived_[frame.microbatch] = std::move(frame);
      break;
    default:
      return make_error("a coordinator takes rows, KV it pulled, errors and acknowledgements, not this frame");
  }
  arrived_cv_.notify_all();
  return ok_status();
}

Status StepAnswers::await(size_t count, double timeout_seconds, std::string_view what) {
  std::unique_lock lock(mutex_);
  const bool done = arrived_cv_.wait_for(lock, std::chrono::duration<double>(timeout_seconds),
                                         [&] { return !failure_.empty() || arrived_.size() == count; });
  if (!failure_.empty()) return make_error("{} {}: {}", what, step_, failure_);
  if (!done) return make_error("{} {}: {} of {} answers after {} s", what, step_, arrived_.size(), count, timeout_seconds);
  return ok_status();
}

std::map<uint32_t, StageFrame> StepAnswers::take_arrived() {
  std::lock_guard lock(mutex_);
  return std::move(arrived_);
}

}  // namespace mnemo::parallel

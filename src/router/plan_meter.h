// The planner's inputs (SPEC D5) as the router measures them from the generations it relays,
// rather than given: Y, the time to first token (the prompt computed, as served: with whatever
// the caches saved); t, the time per generated token after the first; N, the tokens generated
// per request. Medians (means for N) over the last `window` finished generations, so a few
// outliers (a cold start, a failover) do not move the plan. `mnemo plan --from-router URL` reads
// them from the router's /v1/internal/plan_inputs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>

namespace mnemo::router {

class PlanMeter {
 public:
  explicit PlanMeter(size_t window = 512);

  // One finished generation: seconds from the request's arrival to its first generated text
  // (negative: unknown, e.g. an unstreamed reply), to its end, and the tokens it generated
  // (negative: unknown).
  void record(double first_text_seconds, double total_seconds, int64_t tokens);

  struct Measured {
    size_t requests = 0;          // samples in the window
    double prompt_seconds = 0;    // Y: median time to first text (0: none known)
    double token_seconds = 0;     // t: median of (total - first) / (tokens - 1), over replies of 2+ tokens
    double tokens_generated = 0;  // N: mean tokens per request with a known count
  };
  Measured measured() const;

 private:
  struct Sample {
    double first_text_seconds;
    double total_seconds;
    int64_t tokens;
  };
  const size_t window_;
  mutable std::mutex mutex_;
  std::deque<Sample> samples_;  // guarded by mutex_
};

}  // namespace mnemo::router

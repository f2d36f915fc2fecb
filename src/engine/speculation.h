// Speculative decoding's policy (issue 26): whether a sequence drafts this step and how many
// tokens. A draft of k tokens costs k extra rows in the step's pass; it pays when the tokens it
// is expected to add outweigh them. Batch-1 decode reads every weight once per pass, so a few
// extra rows cost little; a step whose rows already keep the cores busy (a large batch, a
// prefill chunk) gains nothing, so drafts stop at a cap on the step's rows.
#pragma once

#include <cstdint>

namespace mnemo {

struct SpeculationConfig {
  bool enabled = true;     // serve --speculation on|off; a request may opt out ("speculation": false)
  int32_t max_draft = 8;   // tokens drafted per sequence and step, at most
  // No draft once the step's rows reach this: past it the pass is bound by compute, and every
  // drafted row costs about what a token of its own would.
  int32_t max_step_tokens = 16;
  // A drafted row's cost as a share of a one-token pass until the engine has learnt it from its
  // own steps (RowCostEstimator).
  double row_cost = 0.1;
  // Learn it (off: row_cost stays, so that tests' drafts do not depend on the clock).
  bool learn_row_cost = true;
};

// What a drafted row costs on this machine, learnt from the engine's own decode steps: a
// least-squares line seconds = fixed + per_row * rows through recent steps (exponentially
// forgotten, so it follows the machine's state), and per_row / (fixed + per_row), a row's share
// of a one-row pass. The kernels decide it: where a pass streams the weights once whatever its
// rows (wide vectors) a row costs a few percent; where the products are compute-bound at a few
// rows (AVX2 on 2 cores), nearly half a pass.
class RowCostEstimator {
 public:
  static constexpr double kForget = 0.98;  // per step
  void observe(int32_t rows, double seconds);
  // The learnt share, or `fallback` until the steps seen vary enough in rows to fit a line.
  double row_cost(double fallback) const;

 private:
  double n_ = 0, sum_r_ = 0, sum_t_ = 0, sum_rr_ = 0, sum_rt_ = 0;
};

// A sequence's acceptance rate, and the draft length it makes worth verifying. Each verified
// draft of k tokens that kept a of them is a + 1 trials of "the next drafted token is kept" (a
// when all k were), a of them kept; the rate is their exponentially weighted mean. While a
// sequence does not draft, its rate drifts back towards the prior, so one that stopped drafting
// tries again.
class AcceptanceTracker {
 public:
  static constexpr double kPrior = 0.5;
  static constexpr double kWeight = 0.25;  // of the newest verification
  static constexpr double kDrift = 0.05;   // per step without a draft, towards the prior

  static constexpr int32_t kProbeEvery = 8;  // steps without a draft before a one-token probe

  double rate() const { return rate_; }
  void observe(int32_t drafted, int32_t accepted);
  void idle() {
    rate_ += (kPrior - rate_) * kDrift;
    ++idle_steps_;
  }
  // Whether a one-token draft should test the rate anew: where rows are dear even the prior
  // does not pay for a draft, and without drafts a sequence that repeats its context (code
  // copied back) would never learn that its drafts are kept.
  bool should_probe() const { return idle_steps_ >= kProbeEvery; }
  // The k in [0, max_draft] that maximises (1 + expected kept tokens) / (1 + k * row_cost): the
  // tokens a pass yields per unit of its time, kept tokens following a geometric law.
  int32_t draft_length(int32_t max_draft, double row_cost) const;

 private:
  double rate_ = kPrior;
  int32_t idle_steps_ = 0;
};

// A drafted row's cost as a sequence weighs it when `sequences` sample in the step: the step's
// time grows by row_cost of a one-row pass per row, and the whole batch's tokens wait for it,
// so against one sequence's own yield a row costs sequences * row_cost / (1 + row_cost *
// (sequences - 1)): row_cost alone, rising towards 1 as the batch grows.
double shared_row_cost(double row_cost, int32_t sequences);

// The expected tokens kept of a k-token draft when each is kept with probability p, given the
// ones before it were: p + p^2 + ... + p^k.
double expected_accepted(double p, int32_t k);

}  // namespace mnemo

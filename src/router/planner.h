// DejaVu's planner (SPEC D5): whether to split a cluster into prompt (prefill) and token (decode)
// machines, and how. With Y the time of a prompt, t the time of one generated token, N the
// tokens generated per request, D machines and m in [1, 2) the overhead factor of streaming
// prompt KV to the token machines, disaggregation pays only if
//
//   Y / t > (D - 1) / (D (2 - m) - 1)
//
// and then D_p = D m Y / (m Y + N t) machines take prompts and D_t = D N t / (m Y + N t) tokens
// (rounded to whole machines, at least one each). Pure; `mnemo plan` feeds it measured figures.
#pragma once

#include <cstdint>
#include <string>

#include "util/result.h"

namespace mnemo::router {

struct PlanInputs {
  double prompt_seconds = 0;    // Y
  double token_seconds = 0;     // t
  double tokens_generated = 0;  // N
  int32_t machines = 0;         // D
  double overhead = 1.0;        // m
};

struct Plan {
  bool disaggregate = false;
  double threshold = 0;      // what Y / t must exceed (infinity: never, with this D and m)
  double ratio = 0;          // Y / t
  double prompt_machines = 0;  // D_p and D_t as the formula gives them
  double token_machines = 0;
  int32_t prompt_instances = 0;  // whole machines (0 and D when colocated)
  int32_t token_instances = 0;
  std::string explanation;
};

// An Error names a figure out of range (times > 0, N > 0, D >= 1, 1 <= m < 2).
Result<Plan> plan_cluster(const PlanInputs& in);

}  // namespace mnemo::router

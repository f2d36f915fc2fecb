#include "router/planner.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

namespace mnemo::router {

Result<Plan> plan_cluster(const PlanInputs& in) {
  if (!(in.prompt_seconds > 0)) return make_error("prompt time Y must be > 0, got {}", in.prompt_seconds);
  if (!(in.token_seconds > 0)) return make_error("per-token time t must be > 0, got {}", in.token_seconds);
  if (!(in.tokens_generated > 0)) return make_error("tokens generated N must be > 0, got {}", in.tokens_generated);
  if (in.machines < 1) return make_error("machines D must be >= 1, got {}", in.machines);
  if (!(in.overhead >= 1 && in.overhead < 2)) return make_error("streaming overhead m must be in [1, 2), got {}", in.overhead);
  Plan p;
  const double d = in.machines;
  const double m = in.overhead;
  p.ratio = in.prompt_seconds / in.token_seconds;
  const double denominator = d * (2 - m) - 1;
  p.threshold = denominator > 0 ? (d - 1) / denominator : std::numeric_limits<double>::infinity();
  const double work = m * in.prompt_seconds + in.tokens_generated * in.token_seconds;
  p.prompt_machines = d * m * in.prompt_seconds / work;
  p.token_machines = d * in.tokens_generated * in.token_seconds / work;
  p.disaggregate = in.machines >= 2 && p.ratio > p.threshold;
  if (p.disaggregate) {
    p.prompt_instances = std::clamp(static_cast<int32_t>(std::lround(p.prompt_machines)), 1, in.machines - 1);
    p.token_instances = in.machines - p.prompt_instances;
    p.explanation = fmt::format("Y/t = {:.3g} > {:.3g}: disaggregate, {} prompt and {} token machines (D_p = {:.2f}, D_t = {:.2f})",
                                p.ratio, p.threshold, p.prompt_instances, p.token_instances, p.prompt_machines,
                                p.token_machines);
  } else {
    p.prompt_instances = 0;
    p.token_instances = in.machines;
    p.explanation = std::isinf(p.threshold) || in.machines < 2
                        ? fmt::format("with D = {} and m = {:.2f} disaggregation never pays: keep {} colocated machines",
                                      in.machines, m, in.machines)
                        : fmt::format("Y/t = {:.3g} <= {:.3g}: keep {} colocated machines", p.ratio, p.threshold, in.machines);
  }
  return p;
}

}  // namespace mnemo::router

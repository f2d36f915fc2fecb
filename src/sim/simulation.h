// One `mnemo simulate` run as a library call: read the data set, count its tokens (the model's
// tokenizer, or the chars/4 estimate), schedule arrivals and think times, then replay the same
// trace under each policy.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kv/cost_model.h"
#include "sim/sim_config.h"
#include "sim/trace.h"
#include "sim/trace_stats.h"
#include "util/result.h"

namespace mnemo::sim {

struct SimulationOptions {
  std::string data_path;          // ShareGPT JSONL
  std::string model_path;         // GGUF whose tokenizer and chat template count tokens
  bool estimate_tokens = false;   // chars/4 instead of the model's tokenizer
  size_t conversations = 0;       // 0: the whole data set
  int32_t max_context = 32768;    // Gemma 3 270M's context; longer conversations end early
  double rate = 0.1;              // conversation arrivals per second (Poisson)
  double think_mean_s = 60.0;     // exponential think time between turns
  std::string think_time_trace;   // Mooncake trace: draw think times from its turn gaps instead
  double think_time_scale = 1.0;  // multiplies those gaps
  double decode_seconds_per_token = 0.02;
  uint64_t seed = 1;
  SimConfig cache;  // with the cost model (--profile)
  std::vector<std::string> policies;
};

struct SimulationResult {
  TraceStats trace;
  std::vector<PolicyOutcome> outcomes;  // in the order of options.policies
};

// The trace alone (what every policy replays).
Result<Trace> build_trace(const SimulationOptions& options);

Result<SimulationResult> run_simulation(const SimulationOptions& options);

nlohmann::json simulation_options_json(const SimulationOptions& options);
nlohmann::json trace_stats_json(const TraceStats& stats);

}  // namespace mnemo::sim

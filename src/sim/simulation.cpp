#include "sim/simulation.h"

#include <memory>

#include <fmt/ranges.h>

#include "loadgen/dataset.h"
#include "loadgen/think_time.h"
#include "loadgen/token_counter.h"
#include "sim/arrival_schedule.h"
#include "sim/cache_replay.h"
#include "sim/conversation_lengths.h"
#include "sim/estimated_token_counter.h"

namespace mnemo::sim {
namespace {

Result<std::unique_ptr<loadgen::TokenCounter>> make_counter(const SimulationOptions& o) {
  if (o.estimate_tokens || o.model_path.empty()) {
    return std::unique_ptr<loadgen::TokenCounter>(std::make_unique<EstimatedTokenCounter>());
  }
  auto counter = loadgen::token_counter_from_gguf(o.model_path);
  if (!counter.ok()) return counter.error().with_context("token counting (use --estimate-tokens to count chars/4 instead)");
  return counter;
}

Result<loadgen::ThinkTime> make_think_time(const SimulationOptions& o) {
  if (o.think_time_trace.empty()) return loadgen::ThinkTime::exponential(o.think_mean_s);
  MNEMO_ASSIGN_OR_RETURN(std::vector<double> gaps, loadgen::mooncake_turn_gaps(o.think_time_trace));
  if (gaps.empty()) return make_error("{}: no turn gap found", o.think_time_trace);
  return loadgen::ThinkTime::empirical(std::move(gaps), o.think_time_scale);
}

}  // namespace

Result<Trace> build_trace(const SimulationOptions& o) {
  if (!(o.rate > 0)) return make_error("the arrival rate must be positive, got {}", o.rate);
  if (o.think_mean_s < 0 || o.decode_seconds_per_token < 0) return make_error("times must not be negative");
  MNEMO_ASSIGN_OR_RETURN(const std::vector<loadgen::DatasetConversation> dataset, loadgen::load_sharegpt(o.data_path));
  if (dataset.empty()) return make_error("{}: no conversation", o.data_path);
  MNEMO_ASSIGN_OR_RETURN(const std::unique_ptr<loadgen::TokenCounter> counter, make_counter(o));
  MNEMO_ASSIGN_OR_RETURN(const std::vector<ConversationLengths> lengths,
                         measure_conversations(dataset, *counter, o.conversations, o.seed, o.max_context));
  MNEMO_ASSIGN_OR_RETURN(loadgen::ThinkTime think, make_think_time(o));
  return schedule_arrivals(lengths, ArrivalOptions{o.rate, std::move(think), o.decode_seconds_per_token, o.seed});
}

Result<SimulationResult> run_simulation(const SimulationOptions& o) {
  std::vector<RetentionPolicy> policies;
  for (const std::string& name : o.policies) {
    const std::optional<RetentionPolicy> policy = simulated_policy(name);
    if (!policy) return make_error("unknown eviction policy '{}' ({})", name, fmt::join(simulated_policy_names(), ", "));
    policies.push_back(*policy);
  }
  if (policies.empty()) return make_error("no policy to simulate");
  MNEMO_ASSIGN_OR_RETURN(const Trace trace, build_trace(o));
  SimulationResult result;
  result.trace = trace_stats(trace, o.cache.chunk_tokens);
  for (size_t i = 0; i < policies.size(); ++i) {
    MNEMO_ASSIGN_OR_RETURN(PolicyOutcome outcome, replay_through_cache(trace, o.cache, policies[i], o.policies[i]));
    result.outcomes.push_back(std::move(outcome));
  }
  return result;
}

nlohmann::json simulation_options_json(const SimulationOptions& o) {
  return {
      {"data", o.data_path},
      {"token_counter", o.estimate_tokens || o.model_path.empty() ? std::string("chars/4 estimate") : o.model_path},
      {"conversations", o.conversations},
      {"max_context", o.max_context},
      {"rate", o.rate},
      {"think_time", o.think_time_trace.empty() ? nlohmann::json({{"exponential_mean_s", o.think_mean_s}})
                                                : nlohmann::json({{"mooncake_trace", o.think_time_trace},
                                                                  {"scale", o.think_time_scale}})},
      {"decode_seconds_per_token", o.decode_seconds_per_token},
      {"seed", o.seed},
      {"chunk_tokens", o.cache.chunk_tokens},
      {"kv_bytes_per_token", o.cache.kv_bytes_per_token},
      {"sliding_window", o.cache.sliding_window},
      {"layers", o.cache.layers},
      {"global_layers", o.cache.global_layers},
      {"host_compact_share", o.cache.host_compact_share},
      {"kv_types", o.cache.kv_types},
      {"host_exact_share", o.cache.host_exact_share},
      {"end_signal_share", o.cache.end_signal_share},
      {"keep_alive_share", o.cache.keep_alive_share},
      {"keep_alive_ttl_s", o.cache.keep_alive_ttl_s},
      {"capacity_bytes", {{"device", o.cache.capacity_bytes[0]}, {"host", o.cache.capacity_bytes[1]}, {"disk", o.cache.capacity_bytes[2]}}},
      {"cost_model", {{"source", o.cache.cost.source},
                      {"per_token_seconds", o.cache.cost.per_token_seconds},
                      {"per_context_token_seconds", o.cache.cost.per_context_token_seconds}}},
      {"policies", o.policies},
  };
}

nlohmann::json trace_stats_json(const TraceStats& s) {
  return {
      {"conversations", s.conversations},   {"turns", s.turns},
      {"prompt_tokens", s.prompt_tokens},   {"reply_tokens", s.reply_tokens},
      {"max_context_tokens", s.max_context_tokens}, {"duration_s", s.duration_s},
      {"peak_live_chunks", s.peak_live_chunks},     {"mean_live_chunks", s.mean_live_chunks},
      {"peak_running_chunks", s.peak_running_chunks},
  };
}

}  // namespace mnemo::sim

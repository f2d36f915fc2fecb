#include "cli/simulate_cluster.h"

#include <cstdio>

#include "loadgen/report.h"
#include "router/routing_policy.h"
#include "sim/cache_replay.h"
#include "sim/cluster_report.h"

namespace mnemo::cli {
namespace {

int fail(const Error& error) {
  std::fprintf(stderr, "error: %s\n", error.message().c_str());
  return 1;
}

Result<sim::ClusterTrace> cluster_trace(const ClusterArgs& args, const sim::SimulationOptions& o) {
  if (args.workload == "mooncake") return sim::load_mooncake_trace(args.mooncake_path, args.mooncake);
  MNEMO_ASSIGN_OR_RETURN(const sim::Trace trace, sim::build_trace(o));
  return sim::cluster_trace_of(trace, o.cache.chunk_tokens);
}

}  // namespace

void add_cluster_flags(CLI::App* cmd, ClusterArgs& args) {
  cmd->add_option("--instances", args.instances,
                  "Simulate a cluster of this many instances (a list: each in turn) behind the router's routing code")
      ->delimiter(',')
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--routing", args.routing, "With --instances: the routing policies to compare")
      ->capture_default_str()
      ->delimiter(',')
      ->check(CLI::IsMember(router::policy_names()));
  cmd->add_option("--cache-policy", args.cache_policy, "With --instances: every instance's cache policy")
      ->capture_default_str()
      ->check(CLI::IsMember({"mnemo", "lru", "pensieve"}));
  cmd->add_option("--workload", args.workload,
                  "With --instances: mooncake (the production trace, --mooncake-trace) or conversations (--data, as "
                  "without --instances)")
      ->capture_default_str()
      ->check(CLI::IsMember({"mooncake", "conversations"}));
  cmd->add_option("--mooncake-trace", args.mooncake_path, "The Mooncake trace (JSONL)")->capture_default_str();
  cmd->add_option("--mooncake-scale", args.mooncake.scale, "Divides the trace's token counts (a 512-token block becomes 512 / this)")
      ->capture_default_str()
      ->check(CLI::IsMember({1, 2, 4, 8, 16, 32, 64, 128, 256, 512}));
  cmd->add_option("--trace-copies", args.mooncake.copies,
                  "Replay this many copies of the trace's hour together (each with its own tokens and a random shift), "
                  "so the load can grow with the cluster")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--max-requests", args.mooncake.max_requests, "The trace's first requests only (0: all)")->capture_default_str();
  cmd->add_flag("--no-transfers", args.no_transfers, "Cache-aware routing never moves a prompt's KV between instances");
  cmd->add_option("--transfer-gbps", args.transfer_gbps, "KV transfer bandwidth between instances, GB/s")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--transfer-overhead-ms", args.transfer_overhead_ms, "Fixed cost of one KV transfer, ms")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--request-seconds", args.request_seconds, "The router's charge per request in flight on an instance")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--pressure-weight", args.pressure_weight,
                  "Cache-aware: the share of its recompute charged for each cached token a placement pushes out of a full "
                  "cache (0: off)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
}

int run_cluster_simulation(const ClusterArgs& args, const sim::SimulationOptions& o, const std::string& json_path) {
  auto trace = cluster_trace(args, o);
  if (!trace.ok()) return fail(trace.error());
  sim::ClusterConfig config;
  config.cache = o.cache;
  const std::string& cache_policy = args.cache_policy;
  config.cache_policy = sim::simulated_policy(cache_policy).value_or(RetentionPolicy::kMnemo);
  config.transfers = !args.no_transfers;
  config.decode_seconds_per_token = o.decode_seconds_per_token;
  config.routing_cost.transfer_bytes_per_second = args.transfer_gbps * 1e9;
  config.routing_cost.transfer_overhead_seconds = args.transfer_overhead_ms / 1e3;
  config.routing_cost.request_seconds = args.request_seconds;
  config.routing_cost.pressure_weight = args.pressure_weight;
  std::printf("cluster: %zu requests over %.0f s (%s), %d-token chunks, cache policy %s, KV %s, transfers %s\n",
              trace->requests.size(), trace->duration_s(), args.workload.c_str(), o.cache.chunk_tokens, cache_policy.c_str(),
              o.cache.kv_types.c_str(), config.transfers ? "on" : "off");
  std::vector<sim::ClusterOutcome> outcomes;
  for (const int32_t n : args.instances) {
    for (const std::string& routing : args.routing) {
      config.instances = n;
      config.routing = router::parse_policy(routing).value();
      auto outcome = sim::replay_cluster(*trace, config);
      if (!outcome.ok()) return fail(outcome.error().with_context(fmt::format("{} instances, {}", n, routing)));
      outcomes.push_back(*outcome);
      std::fflush(stdout);
    }
  }
  std::printf("\n%s", sim::format_cluster_table(outcomes).c_str());
  if (!json_path.empty()) {
    const nlohmann::json json = {{"config", {{"simulation", sim::simulation_options_json(o)},
                                             {"workload", args.workload},
                                             {"cache_policy", args.cache_policy},
                                             {"mooncake_trace", args.mooncake_path},
                                             {"mooncake_scale", args.mooncake.scale},
                                             {"trace_copies", args.mooncake.copies},
                                             {"requests", trace->requests.size()},
                                             {"transfers", config.transfers},
                                             {"transfer_gbps", args.transfer_gbps},
                                             {"transfer_overhead_ms", args.transfer_overhead_ms},
                                             {"request_seconds", args.request_seconds}}},
                                 {"outcomes", sim::cluster_outcomes_json(outcomes)}};
    if (const Status written = loadgen::write_text_file(json_path, json.dump(1) + "\n"); !written.ok()) return fail(written.error());
  }
  return 0;
}

}  // namespace mnemo::cli

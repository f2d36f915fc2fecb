// `mnemo simulate --instances N,...`: the cluster simulation (sim/cluster_replay.h) of every
// instance count and routing policy asked for, on the Mooncake trace or the conversations, as a
// table and JSON. The flags are `simulate`'s own plus these.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "router/routing_policy.h"
#include "sim/cluster_trace.h"
#include "sim/simulation.h"

namespace mnemo::cli {

struct ClusterArgs {
  std::vector<int32_t> instances;  // none: not a cluster simulation
  std::vector<std::string> routing = router::policy_names();
  std::string cache_policy = "mnemo";
  std::string workload = "mooncake";
  std::string mooncake_path;
  sim::MooncakeOptions mooncake;
  bool no_transfers = false;
  double transfer_gbps = 8;         // GB/s between instances
  double transfer_overhead_ms = 1;  // per transfer
  double request_seconds = 1.0;     // the router's charge per request in flight
  double pressure_weight = router::CostParams{}.pressure_weight;  // cache-aware: a placement pushing cached tokens out
};

void add_cluster_flags(CLI::App* cmd, ClusterArgs& args);
// Runs every instance count x routing; 0, or 1 after printing the error.
int run_cluster_simulation(const ClusterArgs& args, const sim::SimulationOptions& options, const std::string& json_path);

}  // namespace mnemo::cli

// Subcommands of the `mnemo` executable. Each registers its options on the CLI11 app and
// returns the process exit code when run.
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

namespace mnemo::cli {

// Adds a subcommand; `run` is set to its action when the user chose it.
void add_generate_command(CLI::App& app, std::function<int()>& run);
void add_info_command(CLI::App& app, std::function<int()>& run);
void add_bench_command(CLI::App& app, std::function<int()>& run);
void add_serve_command(CLI::App& app, std::function<int()>& run);
void add_loadgen_command(CLI::App& app, std::function<int()>& run);
void add_profile_command(CLI::App& app, std::function<int()>& run);
void add_simulate_command(CLI::App& app, std::function<int()>& run);
void add_route_command(CLI::App& app, std::function<int()>& run);
void add_plan_command(CLI::App& app, std::function<int()>& run);
void add_worker_command(CLI::App& app, std::function<int()>& run);

}  // namespace mnemo::cli

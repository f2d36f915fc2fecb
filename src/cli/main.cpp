#include <cstdio>

#include "cli/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"Mnemo: a stateful LLM serving engine for GGUF models"};
  app.require_subcommand(1);
  std::function<int()> run;
  mnemo::cli::add_generate_command(app, run);
  mnemo::cli::add_info_command(app, run);
  mnemo::cli::add_bench_command(app, run);
  mnemo::cli::add_serve_command(app, run);
  mnemo::cli::add_loadgen_command(app, run);
  mnemo::cli::add_profile_command(app, run);
  mnemo::cli::add_simulate_command(app, run);
  mnemo::cli::add_route_command(app, run);
  mnemo::cli::add_plan_command(app, run);
  mnemo::cli::add_worker_command(app, run);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return run ? run() : 1;
}

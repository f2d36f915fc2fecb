// `mnemo plan`: DejaVu's planner (SPEC D5, router/planner.h). Figures given on the command line,
// or measured: from a `mnemo loadgen --json` run at low load, Y is the median time to first token
// of first turns (a whole prompt computed), t the median time per output token, and N the mean
// tokens generated per request.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "router/planner.h"

namespace mnemo::cli {
namespace {

struct PlanArgs {
  router::PlanInputs in;
  std::string loadgen_json;
  bool json = false;
};

Status read_loadgen(const std::string& path, router::PlanInputs& in) {
  std::ifstream file(path);
  if (!file) return make_error("{}: cannot open", path);
  const nlohmann::json run = nlohmann::json::parse(file, nullptr, /*allow_exceptions=*/false);
  const nlohmann::json* summary = nullptr;
  if (run.is_object() && run.contains("summary")) summary = &run["summary"];
  if (run.is_object() && run.contains("points") && run["points"].is_array() && !run["points"].empty()) {
    summary = &run["points"][0]["summary"];  // a sweep: its lowest rate
  }
  try {
    if (summary == nullptr) return make_error("{}: not a `mnemo loadgen --json` result", path);
    const auto& s = *summary;
    if (in.prompt_seconds <= 0) in.prompt_seconds = s.at("first_turns").at("ttft_s").at("p50").get<double>();
    if (in.token_seconds <= 0) in.token_seconds = s.at("all").at("tpot_s").at("p50").get<double>();
    if (in.tokens_generated <= 0) {
      const double ok = s.at("requests_ok").get<double>();
      in.tokens_generated = ok > 0 ? s.at("output_tokens").get<double>() / ok : 0;
    }
  } catch (const nlohmann::json::exception& e) {
    return make_error("{}: {}", path, e.what());
  }
  return ok_status();
}

int run_plan(PlanArgs args) {
  if (!args.loadgen_json.empty()) {
    if (const Status read = read_loadgen(args.loadgen_json, args.in); !read.ok()) {
      std::fprintf(stderr, "error: %s\n", read.error().message().c_str());
      return 1;
    }
  }
  const auto plan = router::plan_cluster(args.in);
  if (!plan.ok()) {
    std::fprintf(stderr, "error: %s\n", plan.error().message().c_str());
    return 2;
  }
  if (args.json) {
    const nlohmann::json out = {{"disaggregate", plan->disaggregate},  {"ratio", plan->ratio},
                                {"threshold", std::isinf(plan->threshold) ? nlohmann::json(nullptr) : nlohmann::json(plan->threshold)},
                                {"prompt_machines", plan->prompt_machines}, {"token_machines", plan->token_machines},
                                {"prompt_instances", plan->prompt_instances}, {"token_instances", plan->token_instances},
                                {"inputs", {{"Y", args.in.prompt_seconds}, {"t", args.in.token_seconds},
                                            {"N", args.in.tokens_generated}, {"D", args.in.machines}, {"m", args.in.overhead}}}};
    std::printf("%s\n", out.dump(2).c_str());
  } else {
    std::printf("Y = %.4g s, t = %.4g s, N = %.4g, D = %d, m = %.2f\n%s\n", args.in.prompt_seconds, args.in.token_seconds,
                args.in.tokens_generated, args.in.machines, args.in.overhead, plan->explanation.c_str());
  }
  return 0;
}

}  // namespace

void add_plan_command(CLI::App& app, std::function<int()>& run) {
  auto args = std::make_shared<PlanArgs>();
  args->in.machines = 2;
  args->in.overhead = 1.1;
  CLI::App* cmd = app.add_subcommand("plan", "Whether to split a cluster into prefill and decode instances (DejaVu's planner)");
  cmd->add_option("--prompt-seconds,-Y", args->in.prompt_seconds, "Y: time to compute one prompt");
  cmd->add_option("--token-seconds,-t", args->in.token_seconds, "t: time per generated token");
  cmd->add_option("--tokens,-N", args->in.tokens_generated, "N: tokens generated per request");
  cmd->add_option("--machines,-D", args->in.machines, "D: machines in the cluster")->capture_default_str();
  cmd->add_option("--overhead,-m", args->in.overhead, "m in [1, 2): the slowdown of streaming prompt KV")->capture_default_str();
  cmd->add_option("--from-loadgen", args->loadgen_json, "Y, t and N measured by a `mnemo loadgen --json` run (flags override)");
  cmd->add_flag("--json", args->json, "Print the plan as JSON");
  cmd->callback([&run, args] { run = [args] { return run_plan(*args); }; });
}

}  // namespace mnemo::cli

// `mnemo plan`: DejaVu's planner (SPEC D5, router/planner.h). Figures given on the command line,
// or measured: from a `mnemo loadgen --json` run at low load, Y is the median time to first token
// of first turns (a whole prompt computed), t the median time per output token, and N the mean
// tokens generated per request; or from a running `mnemo route`, which measures the same
// figures over the generations it relays (router/plan_meter.h) and knows D, the instances that
// can be split.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "router/planner.h"

namespace mnemo::cli {
namespace {

struct PlanArgs {
  router::PlanInputs in;
  std::string loadgen_json;
  std::string router_url;
  bool machines_given = false;
  bool json = false;
};

// GET ROUTER/v1/internal/plan_inputs; figures already given on the command line are kept.
Status read_router(const std::string& url, bool machines_given, router::PlanInputs& in) {
  httplib::Client client(url);
  client.set_connection_timeout(5);
  client.set_read_timeout(10);
  const auto reply = client.Get("/v1/internal/plan_inputs");
  if (!reply) return make_error("{}: {}", url, httplib::to_string(reply.error()));
  if (reply->status != 200) return make_error("{}/v1/internal/plan_inputs: HTTP {}", url, reply->status);
  const nlohmann::json j = nlohmann::json::parse(reply->body, nullptr, /*allow_exceptions=*/false);
  try {
    if (j.at("requests").get<double>() <= 0) {
      return make_error("{}: the router has relayed no generation yet: nothing measured", url);
    }
    if (in.prompt_seconds <= 0) in.prompt_seconds = j.at("prompt_seconds").get<double>();
    if (in.token_seconds <= 0) in.token_seconds = j.at("token_seconds").get<double>();
    if (in.tokens_generated <= 0) in.tokens_generated = j.at("tokens_generated").get<double>();
    const auto machines = j.at("machines").get<int32_t>();
    if (!machines_given && machines >= 1) in.machines = machines;
  } catch (const nlohmann::json::exception& e) {
    return make_error("{}: not a router's plan inputs: {}", url, e.what());
  }
  return ok_status();
}

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
  if (!args.router_url.empty()) {
    if (const Status read = read_router(args.router_url, args.machines_given, args.in); !read.ok()) {
      std::fprintf(stderr, "error: %s\n", read.error().message().c_str());
      return 1;
    }
  }
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
  cmd->add_option("--machines,-D", args->in.machines, "D: machines in the cluster (default 2, or the router's)")
      ->each([args](const std::string&) { args->machines_given = true; });
  cmd->add_option("--overhead,-m", args->in.overhead, "m in [1, 2): the slowdown of streaming prompt KV")->capture_default_str();
  CLI::Option* from_loadgen = cmd->add_option("--from-loadgen", args->loadgen_json,
                                              "Y, t and N measured by a `mnemo loadgen --json` run (flags override)");
  cmd->add_option("--from-router", args->router_url,
                  "Y, t, N and D measured by a running `mnemo route` at this URL, e.g. http://127.0.0.1:8000 (flags override)")
      ->excludes(from_loadgen);
  cmd->add_flag("--json", args->json, "Print the plan as JSON");
  cmd->callback([&run, args] { run = [args] { return run_plan(*args); }; });
}

}  // namespace mnemo::cli

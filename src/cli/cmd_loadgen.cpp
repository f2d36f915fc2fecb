// `mnemo loadgen`: the multi-turn serving benchmark. Replays ShareGPT conversations against any
// OpenAI-compatible server (Mnemo, llama-server, vLLM) and reports TTFT, TPOT, E2E, prefix reuse
// and goodput under an SLO. `mnemo loadgen sweep` runs a list of rates and reports the highest
// one that meets the SLO. See docs/benchmarks.md.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "loadgen/loadgen.h"
#include "loadgen/report.h"
#include "util/paths.h"

namespace mnemo::cli {
namespace {

struct LoadgenArgs {
  loadgen::LoadgenOptions options;
  std::string api = "chat";
  std::string history = "dataset";
  double rate = 0.1;
  std::vector<double> rates = {0.05, 0.1, 0.2, 0.4};
  int32_t stop_after_violations = 2;
  std::string json_path;
  std::string csv_path;
  bool quiet = false;
  bool dry_run = false;
};

Result<loadgen::Loadgen> prepare(LoadgenArgs& args) {
  args.options.api = args.api == "responses" ? loadgen::Api::kResponses : loadgen::Api::kChatCompletions;
  args.options.history = args.history == "model" ? loadgen::History::kModel : loadgen::History::kDataset;
  args.options.run.show_progress = !args.quiet;
  if (args.dry_run && args.options.model.empty()) args.options.model = "(dry run)";  // no server to ask
  if (args.options.num_conversations == 0 && args.options.run.duration_s <= 0.0) {
    return make_error("give --num-conversations or --duration, or both: a run must end");
  }
  return loadgen::Loadgen::prepare(args.options);
}

Status write_outputs(const LoadgenArgs& args, const nlohmann::json& json, const std::vector<loadgen::RunOutcome>& outcomes) {
  if (!args.json_path.empty()) {
    MNEMO_RETURN_IF_ERROR(loadgen::write_text_file(args.json_path, json.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n"));
  }
  if (!args.csv_path.empty()) MNEMO_RETURN_IF_ERROR(loadgen::write_text_file(args.csv_path, loadgen::records_csv(outcomes)));
  return ok_status();
}

int fail(const Error& error) {
  std::fprintf(stderr, "error: %s\n", error.message().c_str());
  return 1;
}

int run_once(LoadgenArgs args) {
  auto prepared = prepare(args);
  if (!prepared.ok()) return fail(prepared.error());
  if (args.dry_run) {
    auto workload = prepared->plan(args.rate, 0);
    if (!workload.ok()) return fail(workload.error());
    std::printf("%sthink time: %s\n", loadgen::describe_workload(*workload).c_str(),
                prepared->config_json()["think_time"].get<std::string>().c_str());
    return 0;
  }
  auto outcome = prepared->run(args.rate);
  if (!outcome.ok()) return fail(outcome.error());
  std::printf("%s", loadgen::format_summary(outcome->summary).c_str());
  if (const Status written = write_outputs(args, loadgen::run_json(*prepared, *outcome), {*outcome}); !written.ok()) {
    return fail(written.error());
  }
  return 0;
}

int run_sweep(LoadgenArgs args) {
  auto prepared = prepare(args);
  if (!prepared.ok()) return fail(prepared.error());
  auto sweep = prepared->sweep(args.rates, args.stop_after_violations);
  if (!sweep.ok()) return fail(sweep.error());
  std::printf("\n%s: ", args.options.label.empty() ? "sweep" : args.options.label.c_str());
  if (sweep->max_rate_meeting_slo) {
    std::printf("highest rate meeting the SLO: %g conversations/s\n", *sweep->max_rate_meeting_slo);
  } else {
    std::printf("no rate met the SLO\n");
  }
  if (const Status written = write_outputs(args, loadgen::sweep_json(*prepared, *sweep), sweep->points); !written.ok()) {
    return fail(written.error());
  }
  return 0;
}

// Options shared by a single run and a sweep; the sweep subcommand falls through to them.
void add_common_options(CLI::App* cmd, LoadgenArgs& args) {
  loadgen::LoadgenOptions& o = args.options;
  cmd->add_option("--url", o.url, "Server base URL")->capture_default_str();
  cmd->add_option("--api-key", o.api_key, "Sent as 'Authorization: Bearer KEY'");
  cmd->add_option("--model-name", o.model, "Model id to request (default: the first of GET /v1/models)");
  cmd->add_option("--api", args.api, "chat: Chat Completions with the whole history; responses: Responses API with previous_response_id")
      ->capture_default_str()
      ->check(CLI::IsMember({"chat", "responses"}));
  cmd->add_option("--history", args.history,
                  "chat: whose replies the history holds: dataset (the same prompts for every system) or model "
                  "(the server's own replies, as a chat client sends them)")
      ->capture_default_str()
      ->check(CLI::IsMember({"dataset", "model"}));
  cmd->add_option("--label", o.label, "The system's name in the results (e.g. mnemo, llama-server)");
  cmd->add_option("--data", o.data_path, "ShareGPT-format conversations (JSONL)")->capture_default_str();
  cmd->add_option("--tokenizer-model", o.tokenizer_model, "GGUF whose tokenizer and chat template count tokens")->capture_default_str();
  cmd->add_option("-n,--num-conversations", o.num_conversations, "Conversations per run (0: as the duration needs)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--conversation-offset", o.conversation_offset, "Skip this many conversations of the seeded order")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--duration", o.run.duration_s, "Conversations arrive during this many seconds (0: all of --num-conversations)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--drain-timeout", o.run.drain_timeout_s, "After --duration, started conversations get this long; then the rest is dropped")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--max-in-flight", o.run.max_in_flight, "Hard cap on concurrent requests")->capture_default_str()->check(CLI::Range(1, 1024));
  cmd->add_option("--think-time", o.think_time_s, "Mean think time between turns, seconds (exponential)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--think-time-trace", o.think_time_trace, "Draw think times from the turn gaps of this Mooncake trace instead");
  cmd->add_option("--think-time-scale", o.think_time_scale, "Multiplies the trace's gaps (e.g. 0.05 for a short run)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--max-context", o.limits.max_context, "Prompt + reply tokens per turn; conversations are cut to fit")
      ->capture_default_str()
      ->check(CLI::Range(16, 1 << 20));
  cmd->add_option("--max-output-tokens", o.limits.max_output_tokens, "Cap on the forced reply length")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--max-turns", o.limits.max_turns, "Turns per conversation (0: all that fit)")->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--temperature", o.temperature, "Sampling temperature of every request")->capture_default_str();
  cmd->add_option("--request-timeout", o.request_timeout_s, "Seconds before a request is given up")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--slo-ttft-p90", o.slo.ttft_s, "SLO: p90 time to first token, seconds (0: none)")->capture_default_str();
  cmd->add_option("--slo-tpot-p90", o.slo.tpot_s, "SLO: p90 time per output token, seconds (0: none)")->capture_default_str();
  cmd->add_option("--seed", o.run.seed, "Seed of the conversation order, arrivals and think times (0: file order)")->capture_default_str();
  cmd->add_option("--json", args.json_path, "Write the summary and every request as JSON here");
  cmd->add_option("--csv", args.csv_path, "Write one CSV row per request here");
  cmd->add_flag("-q,--quiet", args.quiet, "No progress bar");
  cmd->add_flag("--dry-run", args.dry_run, "Describe the planned workload and send nothing");
}

}  // namespace

void add_loadgen_command(CLI::App& app, std::function<int()>& run) {
  auto args = std::make_shared<LoadgenArgs>();
  args->options.tokenizer_model = reference_model_path();
  args->options.data_path = loadgen::default_dataset_path();
  args->options.slo = {2.0, 0.2};
  CLI::App* cmd = app.add_subcommand("loadgen", "Multi-turn serving benchmark against an OpenAI-compatible server");
  add_common_options(cmd, *args);
  cmd->add_option("-r,--rate", args->rate, "Conversation arrivals per second (Poisson)")->capture_default_str()->check(CLI::PositiveNumber);

  CLI::App* sweep = cmd->add_subcommand("sweep", "Run a list of rates and report the highest that meets the SLO");
  sweep->fallthrough();
  sweep->add_option("--rates", args->rates, "Conversation arrival rates to run")->capture_default_str()->delimiter(',');
  sweep->add_option("--stop-after-violations", args->stop_after_violations,
                    "Stop after this many rates in a row miss the SLO (0: run all)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);

  cmd->callback([&run, args, sweep] {
    if (sweep->parsed()) {
      run = [args] { return run_sweep(*args); };
    } else {
      run = [args] { return run_once(*args); };
    }
  });
}

}  // namespace mnemo::cli

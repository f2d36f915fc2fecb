#include "loadgen/loadgen.h"
#include "loadgen/server_counters.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "loadgen/report.h"

namespace mnemo::loadgen {

std::string default_dataset_path() {
  return (std::filesystem::path(MNEMO_SOURCE_DIR) / "data/sharegpt_en.jsonl").lexically_normal().string();
}

std::string default_mooncake_trace_path() {
  return (std::filesystem::path(MNEMO_SOURCE_DIR) / "data/mooncake_conversation_trace.jsonl").lexically_normal().string();
}

Result<Loadgen> Loadgen::prepare(LoadgenOptions options) {
  Loadgen loadgen;
  MNEMO_ASSIGN_OR_RETURN(loadgen.endpoint_, parse_server_url(options.url));
  loadgen.endpoint_.api_key = options.api_key;
  loadgen.endpoint_.request_timeout_s = options.request_timeout_s;
  if (options.model.empty()) {
    MNEMO_ASSIGN_OR_RETURN(options.model, discover_model(loadgen.endpoint_));
  }
  if (options.history == History::kModel && options.api == Api::kResponses) {
    return make_error("the model's replies as history apply to the Chat Completions API; the Responses API's history is always the server's");
  }
  if (options.data_path.empty()) options.data_path = default_dataset_path();
  MNEMO_ASSIGN_OR_RETURN(loadgen.dataset_, load_sharegpt(options.data_path));
  if (loadgen.dataset_.empty()) return make_error("{}: no conversation", options.data_path);
  loadgen.order_ = conversation_order(loadgen.dataset_.size(), options.run.seed);
  MNEMO_ASSIGN_OR_RETURN(auto counter, token_counter_from_gguf(options.tokenizer_model));
  loadgen.counter_ = std::move(counter);
  if (options.think_time_trace.empty()) {
    loadgen.think_ = ThinkTime::exponential(options.think_time_s);
  } else {
    MNEMO_ASSIGN_OR_RETURN(std::vector<double> gaps, mooncake_turn_gaps(options.think_time_trace));
    if (gaps.empty()) return make_error("{}: no conversation turns found", options.think_time_trace);
    loadgen.think_ = ThinkTime::empirical(std::move(gaps), options.think_time_scale);
  }
  loadgen.options_ = std::move(options);
  return loadgen;
}

Result<std::vector<PlannedConversation>> Loadgen::plan(double rate, size_t point) const {
  size_t count = static_cast<size_t>(std::max(0, options_.num_conversations));
  if (count == 0) {
    // Enough for the duration at this rate, with room for the Poisson process running fast.
    const double expected = rate * options_.run.duration_s;
    count = static_cast<size_t>(std::ceil(expected + 3.0 * std::sqrt(expected) + 4.0));
  }
  const size_t first = static_cast<size_t>(std::max(0, options_.conversation_offset)) + point * count;
  if (first + count > order_.size()) {
    std::fprintf(stderr, "loadgen: warning: the data set has %zu conversations; this run reuses some of earlier runs\n",
                 order_.size());
  }
  return plan_workload(dataset_, order_, first, count, *counter_, options_.limits);
}

Result<RunOutcome> Loadgen::run(double rate, size_t point) const {
  MNEMO_ASSIGN_OR_RETURN(const std::vector<PlannedConversation> workload, plan(rate, point));
  RunConfig config = options_.run;
  config.rate = rate;
  if (config.label.empty()) config.label = fmt::format("{}{}@{}/s", options_.label, options_.label.empty() ? "" : " ", rate);
  const RequestOptions request_options{options_.model, options_.temperature, options_.history};
  const std::optional<ServerCounters> before = fetch_server_counters(endpoint_);
  RunResult result = run_load(workload, *think_, endpoint_, options_.api, request_options, config);
  const std::optional<DecodeFigures> decode = decode_figures(before, fetch_server_counters(endpoint_));
  RunOutcome outcome;
  outcome.rate = rate;
  outcome.summary = summarize_run(result.records, result.turns_planned, options_.slo);
  if (decode) {
    outcome.summary.tokens_per_forward = decode->tokens_per_forward;
    outcome.summary.drafted_tokens = decode->drafted;
    outcome.summary.draft_acceptance = decode->acceptance;
  }
  outcome.records = std::move(result.records);
  return outcome;
}

Result<SweepOutcome> Loadgen::sweep(std::vector<double> rates, int32_t stop_after_violations) const {
  std::sort(rates.begin(), rates.end());
  SweepOutcome sweep;
  int32_t violations_in_a_row = 0;
  for (size_t i = 0; i < rates.size(); ++i) {
    MNEMO_ASSIGN_OR_RETURN(RunOutcome outcome, run(rates[i], i));
    std::printf("\n== %s rate %g conversations/s\n%s", options_.label.c_str(), rates[i], format_summary(outcome.summary).c_str());
    std::fflush(stdout);
    if (outcome.summary.slo_met) {
      sweep.max_rate_meeting_slo = rates[i];
      violations_in_a_row = 0;
    } else {
      ++violations_in_a_row;
    }
    sweep.points.push_back(std::move(outcome));
    if (stop_after_violations > 0 && violations_in_a_row >= stop_after_violations) break;
  }
  return sweep;
}

nlohmann::json Loadgen::config_json() const {
  const LoadgenOptions& o = options_;
  return {{"url", o.url},
          {"model", o.model},
          {"api", o.api == Api::kResponses ? "responses" : "chat"},
          {"history", o.history == History::kModel ? "model" : "dataset"},
          {"data", o.data_path},
          {"tokenizer_model", o.tokenizer_model},
          {"max_context", o.limits.max_context},
          {"max_output_tokens", o.limits.max_output_tokens},
          {"max_turns", o.limits.max_turns},
          {"num_conversations", o.num_conversations},
          {"conversation_offset", o.conversation_offset},
          {"think_time", think_->describe()},
          {"think_time_mean_s", think_->mean()},
          {"temperature", o.temperature},
          {"duration_s", o.run.duration_s},
          {"max_in_flight", o.run.max_in_flight},
          {"seed", o.run.seed}};
}

nlohmann::json run_json(const Loadgen& loadgen, const RunOutcome& outcome) {
  return {{"system", loadgen.options().label},
          {"config", loadgen.config_json()},
          {"rate", outcome.rate},
          {"summary", to_json(outcome.summary)},
          {"requests", to_json(outcome.records)}};
}

nlohmann::json sweep_json(const Loadgen& loadgen, const SweepOutcome& outcome) {
  nlohmann::json points = nlohmann::json::array();
  for (const RunOutcome& point : outcome.points) {
    points.push_back({{"rate", point.rate}, {"summary", to_json(point.summary)}, {"requests", to_json(point.records)}});
  }
  return {{"system", loadgen.options().label},
          {"config", loadgen.config_json()},
          {"slo", {{"ttft_p90_s", loadgen.options().slo.ttft_s}, {"tpot_p90_s", loadgen.options().slo.tpot_s}}},
          {"points", std::move(points)},
          {"max_rate_meeting_slo", outcome.max_rate_meeting_slo ? nlohmann::json(*outcome.max_rate_meeting_slo) : nlohmann::json()}};
}

std::string records_csv(const std::vector<RunOutcome>& outcomes) {
  std::string csv = csv_header();
  for (const RunOutcome& outcome : outcomes) {
    for (const RequestRecord& r : outcome.records) csv += csv_row(r, outcome.rate);
  }
  return csv;
}

}  // namespace mnemo::loadgen

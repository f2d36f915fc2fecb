// `mnemo loadgen` as a library: everything a run needs, prepared once (data set, tokenizer,
// think times, server and model id), then one run at a given rate, or a sweep over rates.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "loadgen/dataset.h"
#include "loadgen/load_runner.h"
#include "loadgen/openai_client.h"
#include "loadgen/stats.h"
#include "loadgen/think_time.h"
#include "loadgen/token_counter.h"
#include "loadgen/workload.h"

namespace mnemo::loadgen {

struct LoadgenOptions {
  std::string url = "http://127.0.0.1:8080";
  std::string api_key;
  std::string model;  // empty: the first model of GET /v1/models
  Api api = Api::kChatCompletions;
  History history = History::kDataset;  // Chat Completions only
  std::string data_path;
  std::string tokenizer_model;
  WorkloadLimits limits;
  int32_t num_conversations = 40;  // per run (0: as many as the duration needs)
  int32_t conversation_offset = 0;  // where in the seeded order runs start
  double think_time_s = 5.0;        // mean of the exponential think time
  std::string think_time_trace;     // Mooncake trace: draw think times from its gaps instead
  double think_time_scale = 1.0;    // multiplies the trace's gaps
  double temperature = 0.0;
  double request_timeout_s = 600.0;
  Slo slo;
  RunConfig run;
  std::string label;  // the system's name in results ("mnemo", "llama-server", ...)
};

// Where the data set lives by default: data/sharegpt_en.jsonl in the repository.
std::string default_dataset_path();
// The Mooncake production trace in the repository (data/).
std::string default_mooncake_trace_path();

struct RunOutcome {
  double rate = 0.0;
  RunSummary summary;
  std::vector<RequestRecord> records;
};

struct SweepOutcome {
  std::vector<RunOutcome> points;
  std::optional<double> max_rate_meeting_slo;
};

class Loadgen {
 public:
  static Result<Loadgen> prepare(LoadgenOptions options);

  // Plans the conversations of sweep point `point` (point 0 for a single run): the next
  // slice of the seeded order, so that points of a sweep never replay each other's
  // conversations (a server would find them in its cache).
  Result<std::vector<PlannedConversation>> plan(double rate, size_t point) const;
  Result<RunOutcome> run(double rate, size_t point = 0) const;
  // Runs the rates in increasing order; stops after `stop_after_violations` consecutive
  // rates miss the SLO (0: never stops early).
  Result<SweepOutcome> sweep(std::vector<double> rates, int32_t stop_after_violations) const;

  const LoadgenOptions& options() const { return options_; }
  nlohmann::json config_json() const;

 private:
  Loadgen() = default;

  LoadgenOptions options_;
  ServerEndpoint endpoint_;
  std::vector<DatasetConversation> dataset_;
  std::vector<size_t> order_;
  std::shared_ptr<TokenCounter> counter_;
  std::optional<ThinkTime> think_;
};

nlohmann::json run_json(const Loadgen& loadgen, const RunOutcome& outcome);
nlohmann::json sweep_json(const Loadgen& loadgen, const SweepOutcome& outcome);
std::string records_csv(const std::vector<RunOutcome>& outcomes);

}  // namespace mnemo::loadgen

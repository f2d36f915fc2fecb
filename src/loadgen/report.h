// A run's results as files and text: JSON (the configuration, the summary and every request),
// CSV (one row per request) and the summary table printed at the end of a run.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "loadgen/request_record.h"
#include "loadgen/stats.h"
#include "loadgen/workload.h"
#include "util/result.h"

namespace mnemo::loadgen {

nlohmann::json to_json(const Distribution& d);
nlohmann::json to_json(const GroupSummary& g);
nlohmann::json to_json(const RunSummary& s);
nlohmann::json to_json(const RequestRecord& r);
nlohmann::json to_json(const std::vector<RequestRecord>& records);

// Per-request CSV. `rate` (conversations/s) is a leading column so sweeps fit in one file.
std::string csv_header();
std::string csv_row(const RequestRecord& r, double rate);

Status write_text_file(const std::string& path, const std::string& text);

// The human-readable summary: throughput, a latency table (all, first turns, turns >= 2), reuse
// and the SLO verdict.
std::string format_summary(const RunSummary& s);

// What a planned workload asks of a server (for --dry-run and reports): conversations, turns,
// prompt and reply lengths, and the prefill a stateless server does against one that reuses
// every earlier turn.
std::string describe_workload(const std::vector<PlannedConversation>& workload);

}  // namespace mnemo::loadgen

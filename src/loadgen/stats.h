// Summary statistics of a run: throughput, latency percentiles (all requests, first turns,
// later turns), prefix reuse as the server reported it, and goodput under an SLO.
//
// Definitions (docs/benchmarks.md repeats them):
// - percentile: linear interpolation between the closest ranks (numpy's default): the p-th
//   percentile of sorted x[0..n) is x[i] + f (x[i+1] - x[i]) with i + f = p/100 (n - 1).
// - TTFT: first streamed text minus send time; E2E: end of the stream minus send time;
//   TPOT: (E2E - TTFT) / (completion tokens - 1), for requests of two or more tokens.
// - window: from the run's start to the end of its last request; throughputs divide by it.
// - a request meets the SLO when its TTFT <= slo.ttft_s and (if it has one) its TPOT <= slo.tpot_s;
//   goodput is such requests per second of the window.
// - the run meets the SLO when no request failed, every planned turn was sent, and the p90 of
//   TTFT and of TPOT are within the bounds. A bound <= 0 is no bound.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "loadgen/request_record.h"

namespace mnemo::loadgen {

double percentile(std::vector<double> values, double p);

struct Distribution {
  int64_t count = 0;
  double mean = 0.0;
  double p50 = 0.0;
  double p90 = 0.0;
  double p99 = 0.0;
};

Distribution distribution_of(const std::vector<double>& values);

struct Slo {
  double ttft_s = 0.0;  // bound on p90 TTFT
  double tpot_s = 0.0;  // bound on p90 TPOT
};

struct GroupSummary {
  int64_t requests = 0;  // successful ones
  Distribution ttft;
  Distribution tpot;
  Distribution e2e;
  int64_t prompt_tokens = 0;  // as reported by the server
  int64_t cached_tokens = 0;
  double cached_share = 0.0;  // cached / prompt tokens
};

struct RunSummary {
  double window_s = 0.0;
  int64_t turns_planned = 0;
  int64_t conversations = 0;  // conversations whose first turn was sent
  int64_t requests_sent = 0;
  int64_t requests_ok = 0;
  int64_t requests_failed = 0;
  int64_t output_tokens = 0;      // of successful requests, as reported
  double request_throughput = 0.0;  // successful requests per second
  double output_throughput = 0.0;   // output tokens per second
  double max_client_queue_s = 0.0;  // longest wait for the in-flight cap (0: the cap never bound)
  GroupSummary all;
  GroupSummary first_turns;
  GroupSummary later_turns;  // turns >= 2
  Slo slo;
  int64_t requests_meeting_slo = 0;
  double goodput = 0.0;  // requests meeting the SLO per second
  bool slo_met = false;
  // From a Mnemo server's /metrics over the run (any other client's requests included): tokens
  // per sequence and forward pass, drafted tokens and the share kept (speculative decoding).
  std::optional<double> tokens_per_forward;
  double drafted_tokens = 0;
  double draft_acceptance = 0;
};

GroupSummary summarize_group(const std::vector<const RequestRecord*>& records);
RunSummary summarize_run(const std::vector<RequestRecord>& records, int64_t turns_planned, const Slo& slo);

}  // namespace mnemo::loadgen

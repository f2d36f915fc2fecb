// A Mnemo server's decode counters from its /metrics (Prometheus text), read before and after a
// run: the tokens each sequence got per forward pass (above 1 with speculative decoding) and its
// drafts' acceptance. Other servers export none of them: then there is nothing to report.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "loadgen/openai_client.h"

namespace mnemo::loadgen {

struct ServerCounters {
  double generation_tokens = 0;
  double decode_passes = 0;
  double drafted = 0;   // every drafter's, summed
  double accepted = 0;
};

// The counters in a /metrics text; nullopt when it lacks mnemo_decode_passes_total.
std::optional<ServerCounters> parse_server_counters(std::string_view metrics_text);
// GET /metrics of the endpoint, parsed; nullopt on any failure (the server is not a Mnemo).
std::optional<ServerCounters> fetch_server_counters(const ServerEndpoint& endpoint);

// What a run added: tokens per forward and the share of drafted tokens kept.
struct DecodeFigures {
  double tokens_per_forward = 0;
  double drafted = 0;
  double acceptance = 0;  // accepted / drafted (0 with no drafts)
};
std::optional<DecodeFigures> decode_figures(const std::optional<ServerCounters>& before, const std::optional<ServerCounters>& after);

}  // namespace mnemo::loadgen

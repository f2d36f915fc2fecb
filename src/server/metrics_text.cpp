#include "server/metrics_text.h"

#include <fmt/format.h>

namespace mnemo::server {
namespace {

void counter(std::string& out, const char* name, const char* help, uint64_t value) {
  out += fmt::format("# HELP mnemo_{0} {1}\n# TYPE mnemo_{0} counter\nmnemo_{0} {2}\n", name, help, value);
}

void gauge(std::string& out, const char* name, const char* help, double value) {
  out += fmt::format("# HELP mnemo_{0} {1}\n# TYPE mnemo_{0} gauge\nmnemo_{0} {2}\n", name, help, value);
}

void histogram(std::string& out, const char* name, const char* help, const Histogram& h) {
  out += fmt::format("# HELP mnemo_{0} {1}\n# TYPE mnemo_{0} histogram\n", name, help);
  uint64_t cumulative = 0;
  for (size_t i = 0; i < h.bounds.size(); ++i) {
    cumulative += h.counts[i];
    out += fmt::format("mnemo_{}_bucket{{le=\"{}\"}} {}\n", name, h.bounds[i], cumulative);
  }
  out += fmt::format("mnemo_{0}_bucket{{le=\"+Inf\"}} {1}\nmnemo_{0}_sum {2}\nmnemo_{0}_count {1}\n", name, h.count, h.sum);
}

}  // namespace

std::string render_metrics(const MetricsSnapshot& m) {
  std::string out;
  counter(out, "requests_total", "Requests accepted by the engine.", m.requests_total);
  counter(out, "requests_finished_total", "Requests finished (any reason).", m.requests_finished);
  counter(out, "requests_cancelled_total", "Requests cancelled (client gone or shutdown).", m.requests_cancelled);
  counter(out, "prompt_tokens_total", "Prompt tokens of accepted requests.", m.prompt_tokens_total);
  counter(out, "generation_tokens_total", "Tokens generated.", m.generation_tokens_total);
  counter(out, "prefix_cache_hit_tokens_total", "Prompt tokens whose KV was reused from the cache.", m.prefix_cache_hit_tokens);
  counter(out, "preemptions_total", "Sequences preempted when the KV pool ran out.", m.preemptions_total);
  counter(out, "swaps_total", "Preemptions by swapping to host memory (the rest recompute).", m.swaps_total);
  counter(out, "steps_total", "Forward passes run.", m.steps_total);
  gauge(out, "running_sequences", "Sequences in the running set.", static_cast<double>(m.running));
  gauge(out, "waiting_sequences", "Sequences waiting (new or preempted).", static_cast<double>(m.waiting));
  gauge(out, "kv_blocks_used", "KV blocks of the device pool in use by sequences.", static_cast<double>(m.kv_blocks_used));
  gauge(out, "kv_blocks_cached", "Device KV blocks kept by the prefix cache.", static_cast<double>(m.kv_blocks_cached));
  gauge(out, "host_blocks_cached", "Host KV blocks kept by the prefix cache.", static_cast<double>(m.host_blocks_cached));
  counter(out, "cache_device_hit_tokens_total", "Reused prompt tokens found on the device.", m.cache_device_hit_tokens);
  counter(out, "cache_host_hit_tokens_total", "Reused prompt tokens brought back from host memory.", m.cache_host_hit_tokens);
  counter(out, "cache_demoted_blocks_total", "Cached blocks moved from device to host.", m.cache_demoted_blocks);
  counter(out, "cache_dropped_blocks_total", "Cached blocks whose KV was discarded.", m.cache_dropped_blocks);
  gauge(out, "kv_blocks_total", "KV blocks in the device pool.", static_cast<double>(m.kv_blocks_total));
  gauge(out, "kv_usage_ratio", "Share of the device KV pool in use.",
        m.kv_blocks_total > 0 ? static_cast<double>(m.kv_blocks_used) / static_cast<double>(m.kv_blocks_total) : 0.0);
  histogram(out, "time_to_first_token_seconds", "Time from arrival to the first token.", m.ttft_seconds);
  histogram(out, "time_per_output_token_seconds", "Time between consecutive tokens of a sequence.", m.tpot_seconds);
  histogram(out, "batch_tokens", "Tokens per forward pass.", m.batch_tokens);
  return out;
}

}  // namespace mnemo::server

#include "sim/policy_report.h"

#include <optional>

#include <fmt/format.h>

#include "sim/byte_size.h"

namespace mnemo::sim {
namespace {

std::optional<double> ratio_to_lru(const PolicyOutcome& o, const std::vector<PolicyOutcome>& all) {
  for (const PolicyOutcome& base : all) {
    if (base.policy == "lru" && base.recomputed_tokens > 0) {
      return static_cast<double>(o.recomputed_tokens) / static_cast<double>(base.recomputed_tokens);
    }
  }
  return std::nullopt;
}

double hit_rate(const PolicyOutcome& o) {
  return o.prompt_tokens > 0 ? static_cast<double>(o.hit_tokens_total()) / static_cast<double>(o.prompt_tokens) : 0.0;
}

std::string mib(int64_t bytes) { return fmt::format("{:.0f}", static_cast<double>(bytes) / 0x1p20); }

}  // namespace

std::string format_policy_table(const std::vector<PolicyOutcome>& outcomes) {
  std::string out = fmt::format("{:<15} {:>12} {:>7} {:>11} {:>12} {:>12} {:>12} {:>7} {:>10} {:>10} {:>10} {:>10}\n",
                                "policy", "recomputed", "vs LRU", "recompute s", "hit device", "hit host", "hit disk",
                                "hit %", "dev>host", "host>disk", "host>dev", "disk>dev");
  for (const PolicyOutcome& o : outcomes) {
    const std::optional<double> ratio = ratio_to_lru(o, outcomes);
    out += fmt::format("{:<15} {:>12} {:>7} {:>11.1f} {:>12} {:>12} {:>12} {:>7.1f} {:>10} {:>10} {:>10} {:>10}\n", o.policy,
                       o.recomputed_tokens, ratio ? fmt::format("{:.3f}", *ratio) : std::string("-"), o.recomputed_seconds,
                       o.hit_tokens[0],
                       o.hit_tokens[1], o.hit_tokens[2], 100.0 * hit_rate(o), mib(o.moved_bytes(Tier::kDevice, Tier::kHost)),
                       mib(o.moved_bytes(Tier::kHost, Tier::kDisk)), mib(o.moved_bytes(Tier::kHost, Tier::kDevice)),
                       mib(o.moved_bytes(Tier::kDisk, Tier::kDevice)));
  }
  out += "(tokens; recompute s: their cost under the cost model; bytes moved in MiB; recomputed = tokens an\n"
         " unbounded cache would have served; every policy replayed through serve's own KV cache)\n";
  return out;
}

nlohmann::json policy_outcome_json(const PolicyOutcome& o, const std::vector<PolicyOutcome>& all) {
  nlohmann::json hits = nlohmann::json::object();
  nlohmann::json evicted = nlohmann::json::object();
  nlohmann::json moved = nlohmann::json::object();
  for (const Tier from : kTiers) {
    hits[std::string(tier_name(from))] = o.hit_tokens[static_cast<size_t>(tier_index(from))];
    evicted[std::string(tier_name(from))] = o.counters.evicted_chunks[static_cast<size_t>(tier_index(from))];
    for (const Tier to : kTiers) {
      if (from != to) moved[fmt::format("{}_to_{}", tier_name(from), tier_name(to))] = o.moved_bytes(from, to);
    }
  }
  const std::optional<double> ratio = ratio_to_lru(o, all);
  return {
      {"policy", o.policy},
      {"turns", o.turns},
      {"prompt_tokens", o.prompt_tokens},
      {"reusable_tokens", o.reusable_tokens},
      {"recomputed_tokens", o.recomputed_tokens},
      {"recomputed_vs_lru", ratio ? nlohmann::json(*ratio) : nlohmann::json(nullptr)},
      {"recomputed_seconds", o.recomputed_seconds},
      {"hit_tokens", hits},
      {"hit_rate", hit_rate(o)},
      {"bytes_moved", moved},
      {"evicted_chunks", evicted},
      {"dropped_chunks", o.counters.dropped_chunks},
      {"device_overcommits", o.counters.device_overcommits},
      {"waited_turns", o.waited_turns},
      {"wait_seconds", o.wait_seconds},
      {"longest_wait_s", o.longest_wait_s},
      {"refused_turns", o.refused_turns},
      {"refused_prompt_tokens", o.refused_prompt_tokens},
      {"peak_device_bytes", o.counters.peak_device_units * o.unit_bytes},
  };
}

nlohmann::json policy_outcomes_json(const std::vector<PolicyOutcome>& outcomes) {
  nlohmann::json list = nlohmann::json::array();
  for (const PolicyOutcome& o : outcomes) list.push_back(policy_outcome_json(o, outcomes));
  return list;
}

}  // namespace mnemo::sim

// `mnemo simulate`: replays ShareGPT conversations (Poisson arrivals, think times between turns)
// against the KV cache with no model (the policies `serve` runs through its own cache), and
// reports per policy the tokens recomputed, hits per tier and bytes moved. See src/sim/ and
// docs/benchmarks.md.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/simulate_cluster.h"
#include "gguf/gguf_file.h"
#include "kv/kv_codec.h"
#include "loadgen/loadgen.h"
#include "model/config.h"
#include "loadgen/report.h"
#include "sim/byte_size.h"
#include "sim/cache_replay.h"
#include "sim/policy_report.h"
#include "sim/simulation.h"
#include "util/paths.h"

namespace mnemo::cli {
namespace {

struct SimulateArgs {
  sim::SimulationOptions options;
  // The geometry flags; each given overrides what the model file says.
  const CLI::Option* kv_bytes_flag = nullptr;
  const CLI::Option* window_flag = nullptr;
  const CLI::Option* layers_flag = nullptr;
  const CLI::Option* global_layers_flag = nullptr;
  std::string device_bytes = "128M";
  std::string host_bytes = "256M";
  std::string disk_bytes = "0";
  std::string kv_types = "device=f16,host=k4v8,disk=k4v8";  // `serve`'s
  double host_exact_share = 0.1;
  std::string profile_path;
  std::string json_path;
  ClusterArgs cluster;
};

int fail(const Error& error) {
  std::fprintf(stderr, "error: %s\n", error.message().c_str());
  return 1;
}

// The KV geometry of the model that counts the tokens: bytes per token (F16, as `serve` keeps
// KV by default), layers, and for a sliding-window model its window and global layers; each
// geometry flag given overrides its part. Without a model (--estimate-tokens), Gemma 3 270M's.
Status resolve_geometry(SimulateArgs& args) {
  sim::SimConfig& cache = args.options.cache;
  sim::SimConfig from_model = cache;
  if (args.options.estimate_tokens) {
    from_model.sliding_window = 512;
  } else {
    MNEMO_ASSIGN_OR_RETURN(gguf::File file, gguf::File::open(args.options.model_path));
    MNEMO_ASSIGN_OR_RETURN(ModelConfig c, read_model_config(file));
    from_model.kv_bytes_per_token = static_cast<int64_t>(kv_layout_of(c, /*block_size=*/1).block_bytes());
    from_model.layers = c.n_layers;
    from_model.sliding_window = c.sliding_window;
    from_model.global_layers = static_cast<int32_t>(std::count(c.layer_is_local.begin(), c.layer_is_local.end(), false));
  }
  if (args.kv_bytes_flag->count() == 0) cache.kv_bytes_per_token = from_model.kv_bytes_per_token;
  if (args.window_flag->count() == 0) cache.sliding_window = from_model.sliding_window;
  if (args.layers_flag->count() == 0) cache.layers = from_model.layers;
  if (args.global_layers_flag->count() == 0) cache.global_layers = from_model.global_layers;
  return ok_status();
}

// The bytes a chunk's copy takes in a tier of `type` per byte of F16 (the ratios do not depend on
// the head dimensions; KIVI's keys depend on the chunk's length).
Result<double> bytes_ratio(KvType type, int32_t chunk_tokens) {
  KvLayout layout;
  layout.n_layers = 1;
  layout.n_kv_heads = 1;
  layout.head_dim_k = layout.head_dim_v = 64;
  layout.block_size = chunk_tokens;
  MNEMO_ASSIGN_OR_RETURN(const KvCodec codec, KvCodec::make(layout, type));
  return static_cast<double>(codec.block_bytes()) / static_cast<double>(layout.block_bytes());
}

Status resolve_kv_types(SimulateArgs& args) {
  sim::SimConfig& cache = args.options.cache;
  MNEMO_ASSIGN_OR_RETURN(const KvTypes types, parse_kv_types(args.kv_types));
  if (types.device != KvType::kF16) return make_error("the simulation counts the device's KV in f16");
  cache.kv_types = kv_types_string(types);
  MNEMO_ASSIGN_OR_RETURN(cache.host_bytes_ratio, bytes_ratio(types.host, cache.chunk_tokens));
  MNEMO_ASSIGN_OR_RETURN(cache.disk_bytes_ratio, bytes_ratio(types.disk, cache.chunk_tokens));
  cache.host_exact_share = types.host == KvType::kF16 ? 0.0 : args.host_exact_share;
  return ok_status();
}

Status resolve(SimulateArgs& args) {
  sim::SimulationOptions& o = args.options;
  if (Status geometry = resolve_geometry(args); !geometry.ok()) return geometry.error().with_context("the KV geometry");
  if (Status types = resolve_kv_types(args); !types.ok()) return types.error().with_context("--kv-types");
  const std::string* texts[] = {&args.device_bytes, &args.host_bytes, &args.disk_bytes};
  for (size_t t = 0; t < o.cache.capacity_bytes.size(); ++t) {
    auto bytes = sim::parse_byte_size(*texts[t]);
    if (!bytes.ok()) return bytes.error().with_context(fmt::format("--{}-bytes", sim::tier_name(sim::kTiers[t])));
    o.cache.capacity_bytes[t] = *bytes;
  }
  if (!args.profile_path.empty()) {
    MNEMO_ASSIGN_OR_RETURN(o.cache.cost, load_cost_model(args.profile_path));
  }
  return ok_status();
}

std::string describe_capacities(const sim::SimConfig& cache) {
  std::string out = fmt::format("cache: {}-token chunks of {}", cache.chunk_tokens, sim::format_byte_size(cache.chunk_bytes()));
  if (cache.sliding_window > 0) {
    out += fmt::format(" ({} compact: {} of {} layers, {}-token window)",
                       sim::format_byte_size(cache.unit_bytes() * cache.global_layers), cache.global_layers, cache.layers,
                       cache.sliding_window);
  }
  out += fmt::format("; KV {}", cache.kv_types);
  if (cache.host_exact_share > 0) out += fmt::format(" ({:.0f}% of the host in f16, empty here)", 100.0 * cache.host_exact_share);
  if (cache.end_signal_share > 0) out += fmt::format("; {:.0f}% of conversations ended by their client", 100.0 * cache.end_signal_share);
  if (cache.keep_alive_share > 0) {
    out += fmt::format("; {:.0f}% kept alive by their client for {:g} s after each turn but the last",
                       100.0 * cache.keep_alive_share, cache.keep_alive_ttl_s);
  }
  out += ";";
  const auto chunks = cache.capacity_chunks();
  for (const sim::Tier t : sim::kTiers) {
    const size_t i = static_cast<size_t>(sim::tier_index(t));
    if (cache.capacity_bytes[i] == 0) continue;
    out += fmt::format(" {} {} ({} chunks, {} tokens)", sim::tier_name(t), sim::format_byte_size(cache.capacity_bytes[i]),
                       chunks[i], chunks[i] * cache.chunk_tokens);
  }
  return out + "\n";
}

int run_simulate(SimulateArgs args) {
  if (const Status resolved = resolve(args); !resolved.ok()) return fail(resolved.error());
  const sim::SimulationOptions& o = args.options;
  if (!args.cluster.instances.empty()) return run_cluster_simulation(args.cluster, o, args.json_path);
  auto result = sim::run_simulation(o);
  if (!result.ok()) return fail(result.error());

  std::printf("%s", sim::describe_trace(result->trace, o.cache.chunk_tokens, o.cache.kv_bytes_per_token).c_str());
  std::printf("%s", describe_capacities(o.cache).c_str());
  std::printf("cost model: %s\n\n%s", o.cache.cost.source.c_str(), sim::format_policy_table(result->outcomes).c_str());
  for (const sim::PolicyOutcome& outcome : result->outcomes) {
    if (outcome.refused_turns > 0) {
      std::printf("%s: %lld turns (%lld prompt tokens) need more blocks than the whole device has; serve refuses them, "
                  "which ends their conversations (not counted above)\n",
                  outcome.policy.c_str(), static_cast<long long>(outcome.refused_turns),
                  static_cast<long long>(outcome.refused_prompt_tokens));
    }
    if (outcome.waited_turns > 0) {
      std::printf("%s: %lld turns found the device held by running turns and waited for them, as the engine queues "
                  "them: %.1f s on average, %.1f s at most\n",
                  outcome.policy.c_str(), static_cast<long long>(outcome.waited_turns),
                  outcome.wait_seconds / static_cast<double>(outcome.waited_turns), outcome.longest_wait_s);
    }
    if (outcome.counters.device_overcommits == 0) continue;
    std::printf("warning: %s: %lld chunks of admitted turns found no device block and ran without caching "
                "(the admission's count of free blocks fell short)\n",
                outcome.policy.c_str(), static_cast<long long>(outcome.counters.device_overcommits));
  }
  if (!args.json_path.empty()) {
    const nlohmann::json json = {{"config", sim::simulation_options_json(o)},
                                 {"trace", sim::trace_stats_json(result->trace)},
                                 {"policies", sim::policy_outcomes_json(result->outcomes)}};
    if (const Status written = loadgen::write_text_file(args.json_path, json.dump(1) + "\n"); !written.ok()) {
      return fail(written.error());
    }
  }
  return 0;
}

// What clients say about their conversations' future (request cache_control), and how often.
void add_client_signal_flags(CLI::App* cmd, sim::SimConfig& cache) {
  cmd->add_option("--end-signal", cache.end_signal_share,
                  "The share of conversations whose client ends them with their last turn (cache_control end), "
                  "which the mnemo policy ranks to leave first")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--keep-alive-signal", cache.keep_alive_share,
                  "The share of conversations whose client asks to keep them for --keep-alive-ttl after each turn but "
                  "the last (cache_control ephemeral with a ttl), which every policy but tail-first and the oracle honours")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--keep-alive-ttl", cache.keep_alive_ttl_s, "The ttl of those keep-alives, seconds")
      ->capture_default_str()
      ->check(CLI::Range(1.0, 365.0 * 86400));
}

}  // namespace

void add_simulate_command(CLI::App& app, std::function<int()>& run) {
  auto args = std::make_shared<SimulateArgs>();
  sim::SimulationOptions& o = args->options;
  o.data_path = loadgen::default_dataset_path();
  o.model_path = reference_model_path();
  o.policies = sim::simulated_policy_names();
  CLI::App* cmd = app.add_subcommand("simulate", "Replay conversations against the KV cache's eviction policies (no model)");
  cmd->add_option("--data", o.data_path, "ShareGPT-format conversations (JSONL)")->capture_default_str();
  cmd->add_option("-m,--model", o.model_path, "GGUF whose tokenizer and chat template count tokens")->capture_default_str();
  cmd->add_flag("--estimate-tokens", o.estimate_tokens, "Count a token per 4 bytes of text instead (no model needed)");
  cmd->add_option("-n,--conversations", o.conversations, "Conversations to replay (0: the whole data set)")->capture_default_str();
  cmd->add_option("--max-context", o.max_context, "A conversation ends before a turn longer than this (tokens)")
      ->capture_default_str()
      ->check(CLI::Range(2, 1 << 24));
  cmd->add_option("-r,--rate", o.rate, "Conversation arrivals per second (Poisson)")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--think-mean", o.think_mean_s, "Mean think time between turns, seconds (exponential)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--think-time-trace", o.think_time_trace, "Draw think times from the turn gaps of this Mooncake trace instead");
  cmd->add_option("--think-time-scale", o.think_time_scale, "Multiplies the trace's gaps")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--decode-seconds", o.decode_seconds_per_token, "Seconds per reply token: how long a turn pins its chunks")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--chunk", o.cache.chunk_tokens, "Tokens per cached chunk")->capture_default_str()->check(CLI::Range(1, 1 << 16));
  args->kv_bytes_flag = (
      cmd->add_option("--kv-bytes-per-token", o.cache.kv_bytes_per_token,
                      "KV bytes per token (layers x KV heads x (K + V dims) x element bytes). The geometry flags "
                      "default to the model's (F16); with --estimate-tokens, to Gemma 3 270M's")
          ->capture_default_str()
          ->check(CLI::PositiveNumber));
  args->window_flag = (cmd->add_option("--sliding-window", o.cache.sliding_window,
                  "A sliding-window model's window in tokens: history a window before an idle conversation's end "
                  "takes --global-layers of --layers of the bytes, as in the real cache (0: none)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 24)));
  args->layers_flag = (cmd->add_option("--layers", o.cache.layers, "Layers of the model (with --sliding-window)")
                                     ->capture_default_str()
                                     ->check(CLI::Range(1, 1024)));
  args->global_layers_flag = (
      cmd->add_option("--global-layers", o.cache.global_layers, "Layers attending to the whole context (with --sliding-window)")
          ->capture_default_str()
          ->check(CLI::Range(1, 1024)));
  cmd->add_option("--device-bytes", args->device_bytes, "Device tier capacity (e.g. 64M, 1.5G)")->capture_default_str();
  cmd->add_option("--host-bytes", args->host_bytes, "Host tier capacity (0: none)")->capture_default_str();
  cmd->add_option("--disk-bytes", args->disk_bytes, "Disk tier capacity (0: none)")->capture_default_str();
  cmd->add_option("--kv-types", args->kv_types,
                  "Element type of each tier, as `serve --kv-types`: a compressed host or disk holds more chunks in its bytes")
      ->capture_default_str();
  cmd->add_option("--host-exact-share", args->host_exact_share,
                  "With a compressed host: the share of its bytes `serve` keeps in f16 (for preempted and imported chunks)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--host-compact-share", o.cache.host_compact_share,
                  "With a sliding window, the share of --host-bytes for compact copies (a pool of their own, as in serve)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  add_client_signal_flags(cmd, o.cache);
  cmd->add_option("--policies", o.policies,
                  "Policies to compare, each replayed through serve's own cache: pensieve, lru, mnemo (serve's "
                  "--cache-policy), tail-first (a radix cache's order, no reuse past a gap), oracle (Belady), slru and arc "
                  "(recency-frequency)")
      ->capture_default_str()
      ->delimiter(',')
      ->check(CLI::IsMember(sim::simulated_policy_names()));
  cmd->add_option("--profile", args->profile_path, "Cost model JSON written by `mnemo profile` (default: the built-in costs)");
  cmd->add_option("--seed", o.seed, "Seed of the conversation order, arrivals and think times (0: file order)")->capture_default_str();
  cmd->add_option("--json", args->json_path, "Write the configuration, trace and per-policy results as JSON here");
  args->cluster.mooncake_path = loadgen::default_mooncake_trace_path();
  add_cluster_flags(cmd, args->cluster);
  cmd->callback([&run, args] { run = [args] { return run_simulate(*args); }; });
}

}  // namespace mnemo::cli

// `mnemo serve`: the OpenAI-compatible server on one model or several (--model repeated, or a
// folder of them), each with its own engine and its share of the KV memory. SIGTERM/SIGINT stop it gracefully:
// no new connections; requests in flight finish, or are cancelled after the grace period.
#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>

#include <pthread.h>
#include <unistd.h>

#include <fmt/format.h>

#include "cli/cluster_membership.h"
#include "cli/commands.h"
#include "cli/edge_flags.h"
#include "cli/serve_pipeline.h"
#include "cli/model_flags.h"
#include "cluster/membership.h"
#include "engine/engine.h"
#include "model/model.h"
#include "server/prompt.h"
#include "server/embeddings.h"
#include "server/server.h"
#include "transfer/kv_transport.h"
#include "util/paths.h"
#include "util/state_id.h"

namespace mnemo::cli {
namespace {

struct ServeArgs {
  std::vector<std::string> model_paths;  // the first is the default
  std::vector<std::string> model_names;  // by position; the file's stem where none is given
  std::string models_dir;                // every .gguf in it is served too
  server::ServerConfig server;
  EngineConfig engine;
  // Cold tiers hold k4v8 (KIVI's 4-bit keys per channel, Q8_0 values): inside llama.cpp's noise
  // band on both default models (tests/model/kv_type_fidelity_test.cpp), 0.42 of F16's bytes.
  std::string kv_types = "device=f16,host=k4v8,disk=k4v8";
  const CLI::Option* kv_types_flag = nullptr;  // given: a type the model cannot hold is an error
  float host_exact_share = 0.1f;
  ModelFlags model_flags;
  EdgeFlags edge;
  int32_t kv_tokens = 65536;
  int32_t host_swap_tokens = 65536;
  int32_t host_compact_tokens = 262144;
  int32_t grace_seconds = 30;
  std::string state_dir;
  int64_t disk_cache_bytes = int64_t{2} << 30;
  std::string cache_policy = "mnemo";
  std::string speculation = "on";
  std::string reasoning_format = "auto";
  std::string profile_path;  // empty: the model's profile if `mnemo profile` wrote one
  std::string cluster_url;   // etcd; empty: a single instance
  std::string cluster_name = "default";
  std::string role = "colocated";
  std::string advertise;     // the address the router reaches this instance at
  int transfer_port = 0;     // of the KV transport (0: any free port)
  server::SamplingFlags sampling;
  std::string pooling;  // of embeddings; empty: the model's (server/embeddings.h)
  PipelineFlags pipeline;
};

// An address peers reach this process at, for links that listen beside the server: a wildcard
// listen address is not one.
std::string reachable_host(const std::string& server_host) {
  return server_host == "0.0.0.0" || server_host.empty() ? "127.0.0.1" : server_host;
}


// The cost model the cache's retention policy uses: the profile given, else the one beside the
// model, else the defaults (the policy still orders chunks sensibly).
Result<CostModel> cost_model_for(const ServeArgs& args, const std::string& model_path) {
  if (!args.profile_path.empty()) return load_cost_model(args.profile_path);
  const std::string beside = cost_model_path_for(model_path);
  if (std::filesystem::exists(beside)) return load_cost_model(beside);
  return CostModel{};
}

// What KV bytes mean: the model file and the KV layout. Disk extents and KV from other
// instances carry it, so another model (or KV type, or chunk size) never reads them.
uint64_t layout_fingerprint(const std::string& model_path, const Model& model, const EngineConfig& config) {
  const KvLayout layout = model.kv_layout(config.block_size, config.kv_dtype);
  std::error_code ec;
  const auto model_bytes = std::filesystem::file_size(model_path, ec);
  const std::string identity =
      std::filesystem::path(model_path).filename().string() + ":" + std::to_string(ec ? 0 : model_bytes);
  return kv_fingerprint(identity, layout.n_layers, layout.n_kv_heads, layout.head_dim_k, layout.head_dim_v,
                        layout.block_size, static_cast<int32_t>(layout.dtype));
}

// The disk tier lives in the state folder.
Result<std::shared_ptr<DiskTier>> open_disk_tier(const ServeArgs& args, const std::string& model_path, const Model& model,
                                                 const EngineConfig& config, int64_t disk_bytes) {
  if (disk_bytes == 0 || !config.prefix_caching) return std::shared_ptr<DiskTier>();
  const KvLayout layout = model.kv_layout(config.block_size, config.kv_dtype);
  const KvType disk_type = config.disk_kv_type.value_or(config.kv_dtype == DType::F32 ? KvType::kF32 : KvType::kF16);
  MNEMO_ASSIGN_OR_RETURN(const KvCodec disk_codec, KvCodec::make(layout, disk_type));
  // Extents of another element type are another layout: the disk's type joins the fingerprint
  // (left out for the device's own type, so existing folders keep theirs).
  uint64_t fingerprint = layout_fingerprint(model_path, model, config);
  if (!disk_codec.is_identity()) fingerprint ^= 0x9e3779b97f4a7c15ull * (static_cast<uint64_t>(disk_type) + 1);
  // Sliding-window models store history a window before its conversation's end compact: the
  // global layers only.
  size_t compact_bytes = 0;
  if (model.config().sliding_window > 0) {
    int32_t global_layers = 0;
    for (int32_t l = 0; l < model.config().n_layers; ++l) global_layers += model.config().is_local(l) ? 0 : 1;
    compact_bytes = static_cast<size_t>(global_layers) * disk_codec.layer_bytes();
  }
  // One folder per fingerprint: chunk keys do not depend on the model, so two models' extents
  // must not share a folder (one would overwrite the other's files).
  const std::string dir = fmt::format("{}/kv/{:016x}", args.state_dir, fingerprint);
  MNEMO_ASSIGN_OR_RETURN(auto disk, DiskTier::open(dir, fingerprint, disk_codec.block_bytes(), disk_bytes, compact_bytes));
  return std::shared_ptr<DiskTier>(std::move(disk));
}

// The tiers' element types, and the host's blocks at equal bytes: --host-swap-tokens and
// --host-compact-tokens count F16 tokens' worth of memory, which a compressed host fills with
// more chunks, keeping --host-exact-share of it in the device's type.
Status apply_kv_types(const ServeArgs& args, const Model& model, EngineConfig& config) {
  MNEMO_ASSIGN_OR_RETURN(KvTypes types, parse_kv_types(args.kv_types));
  config.kv_dtype = types.device == KvType::kF32 ? DType::F32 : DType::F16;
  const KvLayout layout = model.kv_layout(config.block_size, config.kv_dtype);
  // The default's compressed types need rows of 32 elements: a model whose heads are narrower
  // keeps its tiers in the device's type. Named on the command line, such a type is an error.
  const bool given = args.kv_types_flag != nullptr && args.kv_types_flag->count() > 0;
  for (KvType* tier : {&types.host, &types.disk}) {
    if (auto codec = KvCodec::make(layout, *tier); !codec.ok()) {
      if (given) return codec.error().with_context("--kv-types");
      std::fprintf(stderr, "mnemo: %s: its KV stays %s in every tier\n", codec.error().message().c_str(),
                   std::string(kv_type_name(types.device)).c_str());
      *tier = types.device;
    }
  }
  config.host_kv_type = types.host;
  config.disk_kv_type = types.disk;
  MNEMO_ASSIGN_OR_RETURN(const KvCodec host, KvCodec::make(layout, types.host));
  if (host.is_identity()) return ok_status();
  const double bytes_ratio = static_cast<double>(layout.block_bytes()) / static_cast<double>(host.block_bytes());
  const int32_t whole = config.host_swap_blocks;
  // At least one block when there is a share: a preempted sequence larger than the exact blocks
  // is recomputed, never compressed.
  config.host_exact_blocks =
      args.host_exact_share > 0 && whole > 0
          ? std::min(whole, std::max(1, static_cast<int32_t>(std::ceil(args.host_exact_share * static_cast<float>(whole)))))
          : 0;
  config.host_swap_blocks = static_cast<int32_t>(static_cast<double>(whole - config.host_exact_blocks) * bytes_ratio);
  config.host_compact_blocks = static_cast<int32_t>(static_cast<double>(config.host_compact_blocks) * bytes_ratio);
  return ok_status();
}

// The edge's configuration and the port, before the model loads: a mistake there is reported
// before seconds are spent loading.
Result<PortReservation> prepare_edge(ServeArgs& args) {
  std::vector<std::string> cluster_addresses;
  if (!args.cluster_url.empty()) {
    cluster_addresses = {args.cluster_url, args.server.host};
    if (!args.advertise.empty()) cluster_addresses.push_back(args.advertise);
  }
  if (args.pipeline.enabled()) {  // the stages are cluster members: their links need the secret off loopback
    cluster_addresses.push_back(reachable_host(args.server.host));
    cluster_addresses.insert(cluster_addresses.end(), args.pipeline.stages.begin(), args.pipeline.stages.end());
    cluster_addresses.insert(cluster_addresses.end(), args.pipeline.spares.begin(), args.pipeline.spares.end());
    cluster_addresses.insert(cluster_addresses.end(), args.pipeline.tensor_workers.begin(), args.pipeline.tensor_workers.end());
    if (!args.pipeline.etcd_url.empty()) cluster_addresses.push_back(args.pipeline.etcd_url);
  }
  MNEMO_ASSIGN_OR_RETURN(args.server.auth, args.edge.resolve(cluster_addresses));
  args.server.access_log = args.edge.access_log_format();
  MNEMO_RETURN_IF_ERROR(args.edge.prepare_listener());
  args.server.tls = args.edge.tls;
  args.server.max_connections = args.edge.max_connections;
  return PortReservation::take(args.server.host, args.server.port);
}

// One model's engine: its share of the KV memory when `models` share the server.
Result<EngineConfig> engine_config_for(const ServeArgs& args, const std::string& model_path, const Model& model, int models) {
  EngineConfig engine_config = args.engine;
  engine_config.kv_blocks = std::max(1, args.kv_tokens / models / engine_config.block_size);
  engine_config.host_swap_blocks = std::max(0, args.host_swap_tokens / models / engine_config.block_size);
  engine_config.host_compact_blocks = std::max(0, args.host_compact_tokens / models / engine_config.block_size);
  MNEMO_RETURN_IF_ERROR(apply_kv_types(args, model, engine_config));
  engine_config.cache_policy = args.cache_policy == "lru"        ? RetentionPolicy::kLru
                               : args.cache_policy == "pensieve" ? RetentionPolicy::kPensieve
                                                                 : RetentionPolicy::kMnemo;
  engine_config.speculation.enabled = args.speculation == "on";
  MNEMO_ASSIGN_OR_RETURN(engine_config.cost, cost_model_for(args, model_path));
  MNEMO_ASSIGN_OR_RETURN(engine_config.disk, open_disk_tier(args, model_path, model, engine_config, args.disk_cache_bytes / models));
  return engine_config;
}

// A model loaded to serve: its file, tokenizer, template, engine and request defaults.
struct LoadedModel {
  std::string path;
  std::string id;
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
  std::optional<ChatTemplate> chat_template;
  ConnectedPipeline pipeline;       // the stages running the model's layers, if any
  std::unique_ptr<Engine> engine;  // after the pipeline: gone before it
  server::SamplingDefaults sampling;
  Pooling pooling = Pooling::kMean;
};

// The files to serve: each --model, then every .gguf of --models-dir (by name); the ids clients
// name them by: --model-name by position, else the file's stem (which must be unique).
Result<std::vector<std::pair<std::string, std::string>>> models_to_serve(const ServeArgs& args) {
  std::vector<std::string> paths = args.model_paths;
  if (!args.models_dir.empty()) {
    std::error_code ec;
    std::vector<std::string> found;
    for (const auto& entry : std::filesystem::directory_iterator(args.models_dir, ec)) {
      if (entry.path().extension() == ".gguf") found.push_back(entry.path().string());
    }
    if (ec) return make_error(ErrorCode::kIoError, "cannot list --models-dir {}: {}", args.models_dir, ec.message());
    if (found.empty()) return make_error("--models-dir {} holds no .gguf file", args.models_dir);
    std::sort(found.begin(), found.end());
    paths.insert(paths.end(), found.begin(), found.end());
  }
  if (paths.empty()) paths.push_back(chat_model_path());
  if (args.model_names.size() > paths.size()) return make_error("more --model-name ({}) than models ({})", args.model_names.size(), paths.size());
  std::vector<std::pair<std::string, std::string>> out;
  for (size_t i = 0; i < paths.size(); ++i) {
    std::string id = i < args.model_names.size() ? args.model_names[i] : std::filesystem::path(paths[i]).stem().string();
    for (const auto& [path, earlier] : out) {
      if (earlier == id) return make_error("two models are named '{}': give them --model-name", id);
    }
    out.emplace_back(paths[i], std::move(id));
  }
  return out;
}

Result<LoadedModel> load_model(const ServeArgs& args, const std::string& path, std::string id, int models) {
  LoadedModel loaded;
  loaded.path = path;
  loaded.id = std::move(id);
  LoadOptions load_options = args.model_flags.load_options();
  if (args.pipeline.enabled()) restrict_load_for_pipeline(args.pipeline, load_options);
  MNEMO_ASSIGN_OR_RETURN(loaded.model, Model::load(path, load_options));
  MNEMO_ASSIGN_OR_RETURN(loaded.tokenizer, Tokenizer::from_gguf(loaded.model->file()));
  MNEMO_ASSIGN_OR_RETURN(ChatTemplate chat_template, ChatTemplate::for_model(loaded.model->file()));
  loaded.chat_template = std::move(chat_template);
  MNEMO_ASSIGN_OR_RETURN(EngineConfig engine_config, engine_config_for(args, path, *loaded.model, models));
  if (args.pipeline.enabled()) {
    MNEMO_ASSIGN_OR_RETURN(loaded.pipeline, connect_pipeline(args.pipeline, args.cluster_name, path, *loaded.model, engine_config,
                                                             reachable_host(args.server.host), args.server.auth.cluster_secret));
    loaded.model->set_layer_runner(loaded.pipeline.runner());
    engine_config.remote_device = loaded.pipeline.remote_device();  // the KV cache's device tier is the workers'
  }
  loaded.engine = std::make_unique<Engine>(*loaded.model, *loaded.tokenizer, engine_config);
  if (engine_config.disk) {
    std::printf("mnemo: %s: KV disk tier %s (%.1f GiB); %lld cached chunks restored; cost model: %s\n", loaded.id.c_str(),
                engine_config.disk->dir().c_str(), static_cast<double>(args.disk_cache_bytes / models) / (1 << 30),
                static_cast<long long>(loaded.engine->metrics().disk_chunks_cached), engine_config.cost.source.c_str());
  }
  auto sampling = server::sampling_defaults_for(loaded.model->file(), args.sampling);
  if (!sampling.ok()) return sampling.error().with_context(path);
  loaded.sampling = *sampling;
  auto pooling = server::pooling_for(loaded.model->file(), args.pooling);
  if (!pooling.ok()) return pooling.error().with_context(path);
  loaded.pooling = *pooling;
  std::printf("mnemo: %s: requests that leave them out sample with %s\n", loaded.id.c_str(), loaded.sampling.source.c_str());
  return loaded;
}

// In a cluster: the KV transport other instances send KV to over UCX (and this one to them),
// then the membership that publishes this instance in etcd.
struct ClusterPresence {
  std::unique_ptr<transfer::KvTransport> transport;
  std::unique_ptr<ClusterMembership> membership;
};

Result<ClusterPresence> join_cluster(const ServeArgs& args, Engine& engine, server::Server& server, const Model& model,
                                     const std::string& model_path, const std::string& prompt_fingerprint) {
  ClusterPresence presence;
  if (args.cluster_url.empty()) return presence;
  const std::string transfer_host = reachable_host(args.server.host);
  // Messages signed under the cluster secret; sizes bounded by this instance's own layout (a
  // push of a whole pool's KV at most).
  transfer::KvTransportOptions transfer_options;
  transfer_options.cluster_secret = args.server.auth.cluster_secret;
  const KvLayout layout = engine.model().kv_layout(engine.config().block_size, engine.config().kv_dtype);
  transfer_options.limits.block_bytes = static_cast<uint32_t>(layout.block_bytes());
  transfer_options.limits.max_payload_bytes = std::max<uint64_t>(
      transfer_options.limits.max_payload_bytes, static_cast<uint64_t>(engine.config().kv_blocks) * layout.block_bytes());
  auto listening = transfer::KvTransport::listen(
      transfer_host, args.transfer_port,
      [&server](transfer::KvMessage&& m, transfer::Acknowledge acknowledge) { server.receive_kv(std::move(m), std::move(acknowledge)); },
      std::move(transfer_options));
  if (!listening.ok()) return listening.error().with_context("KV transport");
  presence.transport = std::move(*listening);
  server.attach_kv_transport(presence.transport.get(), layout_fingerprint(model_path, model, engine.config()));
  MembershipSettings settings;
  MNEMO_ASSIGN_OR_RETURN(settings.etcd, args.edge.etcd_endpoint(args.cluster_url));
  settings.cluster_url = args.cluster_url;
  settings.cluster_name = args.cluster_name;
  settings.role = args.role;
  settings.address = args.advertise.empty() ? fmt::format("http://{}:{}", args.server.host, server.port()) : args.advertise;
  settings.state_dir = args.state_dir;
  settings.transfer_endpoint = presence.transport->endpoint();
  settings.prompt_fingerprint = prompt_fingerprint;
  settings.cluster_secret = args.server.auth.cluster_secret;
  settings.port = server.port();
  MNEMO_ASSIGN_OR_RETURN(presence.membership, ClusterMembership::join(settings, engine));
  return presence;
}

// Serves until a signal (SIGTERM, SIGINT) or the server stops on its own. The signal waiter
// stops the server; it is joined before anything it uses is destroyed. Once the server has
// stopped (requests in flight done), main ends its grace period early.
void serve_until_signalled(const sigset_t& signals, int grace_seconds, const std::vector<LoadedModel>& models,
                           server::Server& server, ClusterPresence& cluster) {
  const auto shutdown_engines = [&models] {
    for (const LoadedModel& m : models) m.engine->shutdown();
  };
  std::mutex exit_mutex;
  std::condition_variable exit_wake;
  bool exiting = false;
  std::thread signal_waiter([&] {
    int received = 0;
    sigwait(&signals, &received);
    if (received == SIGUSR1) return;  // main is done without a signal (the server stopped on its own)
    std::fprintf(stderr, "mnemo: signal %d: no new connections; finishing requests in flight\n", received);
    cluster.membership.reset();  // leave the cluster first: the router stops sending requests here
    server.stop();
    // Requests still running after the grace period are cancelled.
    std::unique_lock lock(exit_mutex);
    if (!exit_wake.wait_for(lock, std::chrono::seconds(grace_seconds), [&] { return exiting; })) shutdown_engines();
  });
  server.serve();
  shutdown_engines();
  server.attach_kv_transport(nullptr, 0);  // its replicas stop before the transport goes
  {
    std::lock_guard lock(exit_mutex);
    exiting = true;
  }
  exit_wake.notify_all();
  pthread_kill(signal_waiter.native_handle(), SIGUSR1);  // if it still waits for a signal (ignored otherwise: blocked)
  signal_waiter.join();
}

int fail(const Error& error) {
  std::fprintf(stderr, "error: %s\n", error.message().c_str());
  return 1;
}

int run_serve(ServeArgs args) {
  // Signals are taken by one thread with sigwait, never by whichever thread happens to run.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGUSR1);  // main -> the signal waiter: exit
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  auto reservation = prepare_edge(args);
  if (!reservation.ok()) return fail(reservation.error());
  auto to_serve = models_to_serve(args);
  if (!to_serve.ok()) return fail(to_serve.error());
  const int n_models = static_cast<int>(to_serve->size());
  if (n_models > 1 && !args.cluster_url.empty()) return fail(make_error("a cluster instance serves one model (--cluster with {} models)", n_models));
  if (args.pipeline.enabled() && (n_models > 1 || !args.cluster_url.empty())) {
    return fail(make_error("a pipeline's coordinator serves one model, outside a cluster (--pipeline-stage with {} models{})",
                           n_models, args.cluster_url.empty() ? "" : " and --cluster"));
  }
  std::vector<LoadedModel> loaded;
  for (const auto& [path, id] : *to_serve) {
    auto model = load_model(args, path, id, n_models);
    if (!model.ok()) return fail(model.error());
    loaded.push_back(std::move(*model));
  }

  server::ServerConfig config = args.server;
  config.split_reasoning = args.reasoning_format == "auto";
  std::error_code ec;
  std::filesystem::create_directories(args.state_dir, ec);
  if (ec) return fail(make_error(ErrorCode::kIoError, "cannot create state folder {}: {}", args.state_dir, ec.message()));
  config.response_store = args.state_dir + "/responses.sqlite";
  config.model_id = loaded[0].id;
  config.sampling = loaded[0].sampling;
  const std::string prompt_fingerprint = fmt::format("{:016x}", server::prompt_fingerprint(*loaded[0].tokenizer, *loaded[0].chat_template));
  std::vector<server::ServedModel> served;
  for (LoadedModel& m : loaded) served.push_back({m.id, m.engine.get(), m.tokenizer.get(), *m.chat_template, m.sampling, m.pooling});
  server::Server server(std::move(served), config);
  reservation->release();
  if (const Status bound = server.bind(); !bound.ok()) return fail(bound.error());
  auto cluster = join_cluster(args, *loaded[0].engine, server, *loaded[0].model, loaded[0].path, prompt_fingerprint);
  if (!cluster.ok()) return fail(cluster.error());
  for (const LoadedModel& m : loaded) {
    std::printf("mnemo: serving %s as '%s' at %s://%s:%d/ (OpenAI API under /v1)\n", m.path.c_str(), m.id.c_str(),
                config.tls.enabled() ? "https" : "http", config.host.c_str(), server.port());
    const EngineConfig& e = m.engine->config();
    const KvType device_type = e.kv_dtype == DType::F32 ? KvType::kF32 : KvType::kF16;
    const KvTypes types{device_type, e.host_kv_type.value_or(device_type), e.disk_kv_type.value_or(device_type)};
    std::printf("mnemo: KV %s: device %d blocks, host %d + %d exact%s\n", kv_types_string(types).c_str(), e.kv_blocks, e.host_swap_blocks,
                e.host_exact_blocks,
                m.model->config().sliding_window > 0 ? fmt::format(" + {} compact", e.host_compact_blocks).c_str() : "");
  }
  std::fflush(stdout);
  serve_until_signalled(signals, args.grace_seconds, loaded, server, *cluster);
  std::fprintf(stderr, "mnemo: stopped\n");
  return 0;
}

// What requests get that do not say: sampling defaults, the seed, and which browser pages may call.
void add_request_default_flags(CLI::App* cmd, ServeArgs& args) {
  cmd->add_option("--cors-origin", args.server.cors_origins,
                  "Let pages of this origin call the API from a browser (repeatable; \"*\": any origin)");
  cmd->add_option("--temp", args.sampling.temperature,
                  "Temperature of requests that give none (default: the model's general.sampling.temp, else 0.8)")
      ->check(CLI::Range(0.0, 2.0));
  cmd->add_option("--top-k", args.sampling.top_k, "Top-k of requests that give none (default: the model's, else 40; 0: off)")
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--top-p", args.sampling.top_p, "Top-p of requests that give none (default: the model's, else 0.95)")
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--min-p", args.sampling.min_p, "Min-p of requests that give none (default: the model's, else 0.05)")
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--pooling", args.pooling,
                  "How /v1/embeddings pools a model's hidden states: mean (every token run) or last (the last token's; "
                  "a cached prefix is reused). Default: the model's pooling_type, else mean")
      ->check(CLI::IsMember({"mean", "last"}));
  cmd->add_option("--seed", args.server.seed,
                  "Sampling seed of requests that give none (default: a random one per request, so that asking "
                  "again gives a new answer)");
  cmd->add_option("--reasoning-format", args.reasoning_format,
                  "auto: a chat reply's reasoning (between <think> tags: Qwen 3, DeepSeek R1, SmolLM3) comes back apart, "
                  "as reasoning_content and Responses reasoning items; none: the reply as the model wrote it")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "none"}));
}

// How much KV memory each tier has and in which element type.
void add_kv_memory_flags(CLI::App* cmd, ServeArgs& args) {
  cmd->add_option("--kv-tokens", args.kv_tokens, "KV pool size in tokens")->capture_default_str()->check(CLI::Range(16, 1 << 26));
  cmd->add_option("--host-swap-tokens", args.host_swap_tokens, "Host swap space for preempted sequences, in tokens")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 26));
  cmd->add_option("--host-compact-tokens", args.host_compact_tokens,
                  "Host space, in tokens, for sliding-window history kept as its global layers only")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 28));
  cmd->add_option("--device-compact", args.engine.compact_on_device,
                  "Shrink sliding-window history to its global layers on the device before it leaves it")
      ->capture_default_str();
  args.kv_types_flag = cmd->add_option("--kv-types", args.kv_types,
                  "KV element type of each tier: f16 or f32 everywhere, or device=f16|f32,host=TYPE,disk=TYPE with TYPE one of "
                  "f16, f32, q8_0, q4_0, kivi4, k4v8 (the host and disk hold compressed copies; they come back within the model's noise band)")
      ->capture_default_str();
  cmd->add_option("--host-exact-share", args.host_exact_share,
                  "With a compressed host: the share of its memory kept in the device's type, for preempted sequences and "
                  "other instances' chunks (replicas resume token for token)")
      ->capture_default_str()
      ->check(CLI::Range(0.0f, 1.0f));
}

}  // namespace

void add_serve_command(CLI::App& app, std::function<int()>& run) {
  auto args = std::make_shared<ServeArgs>();
  args->server.ui_dir = MNEMO_UI_DIR;
  args->state_dir = cache_dir() + "/state";
  args->engine.block_size = 32;  // SPEC P3's chunk
  CLI::App* cmd = app.add_subcommand("serve", "Serve a model over an OpenAI-compatible HTTP API with a web chat page");
  cmd->add_option("-m,--model", args->model_paths,
                  fmt::format("GGUF model file; repeat it to serve several, chosen by the request's \"model\" (default: {})",
                              chat_model_path()));
  cmd->add_option("--models-dir", args->models_dir, "Serve every .gguf file of this folder too");
  cmd->add_option("--model-name", args->model_names, "Model id clients use, one per model in order (default: the file name)");
  cmd->add_option("--host", args->server.host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", args->server.port, "Port (0: any free port)")->capture_default_str()->check(CLI::Range(0, 65535));
  args->edge.add_auth_to(cmd);
  args->edge.add_server_to(cmd);
  args->edge.add_listener_to(cmd);
  args->edge.add_etcd_to(cmd);
  cmd->add_option("--ui-dir", args->server.ui_dir, "Folder of the web chat page")->capture_default_str();
  cmd->add_option("-t,--threads", args->engine.threads, "Kernel worker threads (0: one per core)")->capture_default_str();
  add_kv_memory_flags(cmd, *args);
  args->model_flags.add_to(cmd);
  args->pipeline.add_to(cmd);
  cmd->add_option("--max-batch-tokens", args->engine.max_batch_tokens, "Tokens per forward pass")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--max-running", args->engine.max_running, "Sequences running at once")->capture_default_str()->check(CLI::Range(1, 4096));
  cmd->add_flag_callback("--no-prefix-cache", [args] { args->engine.prefix_caching = false; },  // benchmarks' stateless baseline
                         "Do not reuse the KV of earlier requests (stateless baseline)");
  cmd->add_option("--max-in-flight", args->server.max_in_flight, "Requests generating at once; more get 429")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--state-dir", args->state_dir, "Folder of durable state (the Responses API's conversations, the KV disk tier)")
      ->capture_default_str();
  cmd->add_option("--chunk-tokens", args->engine.block_size, "Tokens per KV block, the unit of caching and of every tier")
      ->capture_default_str()
      ->check(CLI::IsMember({8, 16, 32, 64, 128}));
  cmd->add_option("--disk-cache-bytes", args->disk_cache_bytes,
                  "Size limit of the KV disk tier under --state-dir (0: no disk tier; KV then does not outlive the process)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 50));
  cmd->add_option("--cache-policy", args->cache_policy,
                  "Which cached chunks leave a tier first: mnemo (expected recompute saved per byte, learnt from "
                  "which conversations return), pensieve (recompute cost / idle time), lru")
      ->capture_default_str()
      ->check(CLI::IsMember({"mnemo", "pensieve", "lru"}));
  cmd->add_option("--speculation", args->speculation,
                  "Speculative decoding drafted from the request's own context (prompt lookup): on or off. Outputs are "
                  "the same either way; a request may opt out with \"speculation\": false")
      ->capture_default_str()
      ->check(CLI::IsMember({"on", "off"}));
  cmd->add_option("--max-cache-ttl", args->server.max_cache_ttl_seconds,
                  "Longest keep-alive a request's cache_control {\"type\": \"ephemeral\", \"ttl\": ...} may ask for, "
                  "in seconds (0: refuse keep-alives)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 365.0 * 86400));
  cmd->add_option("--swap-out-threshold", args->engine.swap_out_threshold,
                  "Copy cached KV to host ahead of need while free device blocks are below this share")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--profile", args->profile_path, "Cost model from `mnemo profile` (default: the one beside the model, if any)");
  cmd->add_option("--cluster", args->cluster_url, "etcd URL: join a cluster (e.g. http://127.0.0.1:2379), behind `mnemo route`");
  cmd->add_option("--cluster-name", args->cluster_name, "Cluster name (key prefix in etcd)")->capture_default_str();
  cmd->add_option("--role", args->role,
                  "Role in the cluster: colocated (prefill and decode), or disaggregated (SPEC D4): prefill (computes "
                  "prompts and sends their KV to a decode instance), decode (generates)")
      ->capture_default_str()
      ->check(CLI::IsMember({"colocated", "prefill", "decode"}));
  cmd->add_option("--transfer-port", args->transfer_port, "Port of the KV transport (UCX) in a cluster (0: any free port)")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--stream-prompt-layers", args->server.stream_prompt_layers,
                  "Send a prompt's KV to its replica (a decode instance, a failover holder) layer by layer while the "
                  "prompt is computed (SPEC D3); false: whole chunks after each step")
      ->capture_default_str();
  cmd->add_option("--advertise", args->advertise, "URL the router reaches this instance at (default: http://HOST:PORT)");
  add_request_default_flags(cmd, *args);
  cmd->add_option("--grace-seconds", args->grace_seconds, "On SIGTERM, time for requests in flight to finish")->capture_default_str();
  cmd->callback([&run, args] { run = [args] { return run_serve(*args); }; });
}

}  // namespace mnemo::cli

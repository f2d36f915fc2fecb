#include "cli/serve_pipeline.h"

#include <cstdio>
#include <functional>
#include <string_view>

namespace mnemo::cli {

void PipelineFlags::add_to(CLI::App* cmd) {
  cmd->add_option("--pipeline-stage", stages,
                  "A `mnemo worker` endpoint (host:port) that runs a contiguous range of the model's layers; "
                  "repeat in layer order. The server keeps scheduling, sampling, the KV cache's bookkeeping and its host and disk "
                  "tiers");
  cmd->add_option("--tensor-worker", tensor_workers,
                  "A `mnemo worker` endpoint that holds a share of every layer's heads and FFN rows (tensor "
                  "parallelism); repeat in rank order, two or more. Not with --pipeline-stage");
  cmd->add_option("--spare-worker,--pipeline-spare", spares,
                  "A `mnemo worker` endpoint that takes a lost stage's or tensor rank's place, its KV restored from the "
                  "replica the next one keeps (repeatable; needs two stages or ranks or more)");
  cmd->add_option("--tensor-workers", tensor_from_cluster,
                  "Take this many tensor ranks from the `mnemo worker --cluster` processes registered in "
                  "--pipeline-cluster (waiting for them); every other one registered is a spare")
      ->check(CLI::Range(2, 64));
  cmd->add_option("--pipeline-stages", stages_from_cluster,
                  "Take this many stages from the `mnemo worker --cluster` processes registered in --pipeline-cluster "
                  "(waiting for them); every other one registered is a spare")
      ->check(CLI::Range(1, 64));
  cmd->add_option("--pipeline-cluster", etcd_url, "etcd URL where the workers register (with --pipeline-stages)");
  cmd->add_option("--pipeline-microbatches", microbatches,
                  "Microbatches a pass is cut into, so every stage is busy (0: one per stage)")
      ->capture_default_str()
      ->check(CLI::Range(0, 64));
  cmd->add_option("--pipeline-step-timeout", step_timeout_seconds,
                  "Seconds a pass waits for its microbatches to come back from the last stage before it fails")
      ->capture_default_str()
      ->check(CLI::Range(1.0, 3600.0));
}

void restrict_load_for_pipeline(const PipelineFlags& flags, LoadOptions& options) {
  options.layer_begin = 0;
  options.layer_end = 0;
  options.head = true;
  options.layer_norms = flags.tensor_parallel();
}

namespace {

// The stage endpoints registered now, in the watcher's (id) order.
std::vector<std::string> registered_stages(const cluster::MemberWatcher& watcher) {
  std::vector<std::string> endpoints;
  for (const cluster::InstanceInfo& member : watcher.members()) endpoints.push_back(member.transfer_endpoint);
  return endpoints;
}

// Waits for `count` workers registered in the cluster; the first `count` endpoints (in the
// watcher's order) as `workers`, the others appended to `spares`, and a source of more.
Status take_registered(const PipelineFlags& flags, const std::string& cluster_name, const std::string& cluster_secret,
                       int32_t count, std::string_view flag, ConnectedPipeline& connected, std::vector<std::string>& workers,
                       std::vector<std::string>& spares, std::function<std::vector<std::string>()>& more) {
  if (!workers.empty()) return make_error("{} takes its workers from the cluster: not with workers given by flag too", flag);
  if (flags.etcd_url.empty()) return make_error("{} needs --pipeline-cluster, the etcd the workers register in", flag);
  MNEMO_ASSIGN_OR_RETURN(connected.workers,
                         cluster::MemberWatcher::start(flags.etcd_url, pipeline_stages_prefix(cluster_name), cluster_secret));
  const auto enough = [&](const std::vector<cluster::InstanceInfo>& members) { return static_cast<int32_t>(members.size()) >= count; };
  if (!connected.workers->wait_until(enough, flags.cluster_wait_seconds)) {
    return make_error("{} workers registered in cluster '{}' after {} s, {} wants {}", connected.workers->members().size(),
                      cluster_name, flags.cluster_wait_seconds, flag, count);
  }
  const std::vector<std::string> registered = registered_stages(*connected.workers);
  workers.assign(registered.begin(), registered.begin() + count);
  spares.insert(spares.end(), registered.begin() + count, registered.end());
  more = [watcher = connected.workers.get()] { return registered_stages(*watcher); };
  return ok_status();
}

Result<ConnectedPipeline> connect_tensor_parallel(const PipelineFlags& flags, const std::string& cluster_name,
                                                  const std::string& model_path, const Model& model, const EngineConfig& config,
                                                  const std::string& host, const std::string& cluster_secret) {
  ConnectedPipeline connected;
  if (!flags.stages.empty() || flags.stages_from_cluster > 0) {
    return make_error("tensor ranks and a pipeline's stages (--pipeline-stage, --pipeline-stages) do not mix yet");
  }
  parallel::TensorParallelOptions tensor;
  tensor.workers = flags.tensor_workers;
  tensor.spares = flags.spares;
  if (flags.tensor_from_cluster > 0) {
    MNEMO_RETURN_IF_ERROR(take_registered(flags, cluster_name, cluster_secret, flags.tensor_from_cluster, "--tensor-workers",
                                          connected, tensor.workers, tensor.spares, tensor.more_spares));
  }
  tensor.host = host;
  tensor.cluster_secret = cluster_secret;
  tensor.step_timeout_seconds = flags.step_timeout_seconds;
  MNEMO_ASSIGN_OR_RETURN(connected.tensor, parallel::TensorParallel::connect(model_path, model, config.block_size, config.kv_dtype,
                                                                             config.kv_blocks, tensor));
  for (size_t r = 0; r < tensor.workers.size(); ++r) {
    std::printf("mnemo: tensor rank %zu of %zu at %s\n", r, tensor.workers.size(), tensor.workers[r].c_str());
  }
  return connected;
}

}  // namespace

Result<ConnectedPipeline> connect_pipeline(const PipelineFlags& flags, const std::string& cluster_name,
                                           const std::string& model_path, const Model& model, const EngineConfig& config,
                                           const std::string& host, const std::string& cluster_secret) {
  if (flags.tensor_parallel()) return connect_tensor_parallel(flags, cluster_name, model_path, model, config, host, cluster_secret);
  ConnectedPipeline connected;
  parallel::PipelineOptions options;
  options.stages = flags.stages;
  options.spares = flags.spares;
  if (flags.stages_from_cluster > 0) {
    MNEMO_RETURN_IF_ERROR(take_registered(flags, cluster_name, cluster_secret, flags.stages_from_cluster, "--pipeline-stages",
                                          connected, options.stages, options.spares, options.more_spares));
  }
  options.host = host;
  options.cluster_secret = cluster_secret;
  options.microbatches = flags.microbatches;
  options.step_timeout_seconds = flags.step_timeout_seconds;
  MNEMO_ASSIGN_OR_RETURN(connected.pipeline,
                         parallel::Pipeline::connect(model_path, model, config.block_size, config.kv_dtype, config.kv_blocks, options));
  const std::unique_ptr<parallel::Pipeline>& pipeline = connected.pipeline;
  for (size_t i = 0; i < pipeline->stage_setups().size(); ++i) {
    const parallel::StageSetup& s = pipeline->stage_setups()[i];
    std::printf("mnemo: pipeline stage %zu at %s: layers [%d, %d)\n", i, options.stages[i].c_str(), s.layer_begin, s.layer_end);
  }
  return connected;
}

}  // namespace mnemo::cli

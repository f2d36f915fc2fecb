// `mnemo serve --pipeline-stage ENDPOINT ...`: the server as the coordinator of a pipeline whose
// layers run on `mnemo worker` processes (parallel/pipeline.h). What it changes in serving:
//  - the model loads without layers (the embedding and the output projection only);
//  - the KV cache keeps its bookkeeping, its host tier and its disk tier here and its device
//    tier's bytes on the workers (kv/remote_device.h): a chunk leaving the device is pulled from
//    them, one coming back is pushed to them, so prefix caching, the tiers, the disk and their
//    durability work as on one instance (device compaction is off: compact copies go to the host);
//  - a cluster instance (--cluster) cannot be a coordinator yet (disaggregated prefill streams
//    the device's bytes layer by layer as a pass writes them);
//  - each stage's KV is replicated on the next stage, and a lost stage is replaced by a
//    --pipeline-spare with its KV restored, so its requests go on (parallel/pipeline.h).
// `--tensor-worker ENDPOINT ...` makes it the coordinator of tensor-parallel ranks instead
// (parallel/tensor_parallel.h), with the same restrictions.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cluster/membership.h"
#include "engine/engine.h"
#include "model/model.h"
#include "parallel/pipeline.h"
#include "parallel/tensor_parallel.h"
#include "util/result.h"

namespace mnemo::cli {

// Where `mnemo worker --cluster` registers: apart from the serving instances, so that a router
// never takes a stage for one.
inline std::string pipeline_stages_prefix(const std::string& cluster_name) { return "/mnemo/" + cluster_name + "/stages/"; }

struct PipelineFlags {
  std::vector<std::string> stages;
  std::vector<std::string> spares;
  std::vector<std::string> tensor_workers;  // tensor parallelism: the ranks, in order
  int32_t tensor_from_cluster = 0;  // take this many tensor ranks from the workers registered in etcd
  int32_t stages_from_cluster = 0;  // take this many stages from the workers registered in etcd
  std::string etcd_url;
  double cluster_wait_seconds = 120;
  int32_t microbatches = 0;
  double step_timeout_seconds = 120;

  bool tensor_parallel() const { return !tensor_workers.empty() || tensor_from_cluster > 0; }
  bool enabled() const { return !stages.empty() || stages_from_cluster > 0 || tensor_parallel(); }
  void add_to(CLI::App* cmd);
};

// The load options of a coordinator's model: no layers (but their norms, with tensor workers).
void restrict_load_for_pipeline(const PipelineFlags& flags, LoadOptions& options);
// A coordinator's pipeline, and the watch of the registered workers it takes stages and spares
// from (--pipeline-stages N): the watcher outlives the pipeline, which asks it for spares.
struct ConnectedPipeline {
  std::unique_ptr<cluster::MemberWatcher> workers;
  std::unique_ptr<parallel::Pipeline> pipeline;
  std::unique_ptr<parallel::TensorParallel> tensor;  // instead of the pipeline, with --tensor-worker
  LayerRunner* runner() const { return tensor ? static_cast<LayerRunner*>(tensor.get()) : pipeline.get(); }
  RemoteDevice* remote_device() const { return tensor ? static_cast<RemoteDevice*>(tensor.get()) : pipeline.get(); }
};

// Sets the stages up for `model_path` and the engine's pool; `host`: where the stages send the
// rows back (an address they reach). With --pipeline-stages N, waits for N workers registered in
// the cluster (beyond those, each is a spare).
Result<ConnectedPipeline> connect_pipeline(const PipelineFlags& flags, const std::string& cluster_name,
                                           const std::string& model_path, const Model& model, const EngineConfig& config,
                                           const std::string& host, const std::string& cluster_secret);

}  // namespace mnemo::cli

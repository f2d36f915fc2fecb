#include "cli/serve_pipeline.h"

#include <cstdio>

namespace mnemo::cli {

void PipelineFlags::add_to(CLI::App* cmd) {
  cmd->add_option("--pipeline-stage", stages,
                  "A `mnemo worker` endpoint (host:port) that runs a contiguous range of the model's layers; "
                  "repeat in layer order. The server keeps scheduling, sampling and the KV cache's bookkeeping");
  cmd->add_option("--pipeline-spare", spares,
                  "A `mnemo worker` endpoint that takes a lost stage's place, its KV restored from the replica the "
                  "next stage keeps (repeatable; needs two stages or more)");
  cmd->add_option("--pipeline-microbatches", microbatches,
                  "Microbatches a pass is cut into, so every stage is busy (0: one per stage)")
      ->capture_default_str()
      ->check(CLI::Range(0, 64));
  cmd->add_option("--pipeline-step-timeout", step_timeout_seconds,
                  "Seconds a pass waits for its microbatches to come back from the last stage before it fails")
      ->capture_default_str()
      ->check(CLI::Range(1.0, 3600.0));
}

void restrict_load_for_pipeline(LoadOptions& options) {
  options.layer_begin = 0;
  options.layer_end = 0;
  options.head = true;
}

void restrict_engine_for_pipeline(EngineConfig& config) {
  config.host_swap_blocks = 0;
  config.host_exact_blocks = 0;
  config.host_compact_blocks = 0;
  config.disk.reset();
}

Result<std::unique_ptr<parallel::Pipeline>> connect_pipeline(const PipelineFlags& flags, const std::string& model_path,
                                                             const Model& model, const EngineConfig& config,
                                                             const std::string& host, const std::string& cluster_secret) {
  parallel::PipelineOptions options;
  options.stages = flags.stages;
  options.spares = flags.spares;
  options.host = host;
  options.cluster_secret = cluster_secret;
  options.microbatches = flags.microbatches;
  options.step_timeout_seconds = flags.step_timeout_seconds;
  MNEMO_ASSIGN_OR_RETURN(std::unique_ptr<parallel::Pipeline> pipeline,
                         parallel::Pipeline::connect(model_path, model, config.block_size, config.kv_dtype, config.kv_blocks, options));
  for (size_t i = 0; i < pipeline->stage_setups().size(); ++i) {
    const parallel::StageSetup& s = pipeline->stage_setups()[i];
    std::printf("mnemo: pipeline stage %zu at %s: layers [%d, %d)\n", i, flags.stages[i].c_str(), s.layer_begin, s.layer_end);
  }
  return pipeline;
}

}  // namespace mnemo::cli

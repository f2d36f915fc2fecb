#include "parallel/tensor_parallel.h"

#include "kernels/nn/ops.h"
#include "model/tensor_shard.h"
#include "parallel/model_fingerprint.h"

namespace mnemo::parallel {

Result<std::unique_ptr<TensorParallel>> TensorParallel::connect(const std::string& model_path, const Model& model,
                                                                int32_t block_size, DType kv_dtype, int32_t n_blocks,
                                                                const TensorParallelOptions& options) {
  if (options.workers.size() < 2) return make_error("tensor parallelism needs at least two ranks, not {}", options.workers.size());
  const ModelConfig& c = model.config();
  for (int32_t il = 0; il < c.n_layers; ++il) {
    if (model.weights().layers[static_cast<size_t>(il)].attn_norm.empty()) {
      return make_error("the coordinator's model has no norms for layer {} (load it with layer_norms)", il);
    }
  }
  MNEMO_ASSIGN_OR_RETURN(const uint64_t fingerprint, stage_model_fingerprint(model_path));
  std::unique_ptr<TensorParallel> tp(new TensorParallel(model, options));
  MNEMO_RETURN_IF_ERROR(tp->listen(options.host, options.cluster_secret));
  const auto ranks = static_cast<int32_t>(options.workers.size());
  for (int32_t r = 0; r < ranks; ++r) {
    StageFrame frame;
    frame.kind = StageFrameKind::kSetup;
    frame.setup = {fingerprint, 0, c.n_layers, block_size, n_blocks, kv_dtype, r, ranks};
    const Status status = tp->link_->send(options.workers[static_cast<size_t>(r)], frame, options.setup_timeout_seconds);
    if (!status.ok()) {
      return make_error("tensor rank {} of {} ({}): {}", r, ranks, options.workers[static_cast<size_t>(r)], status.error().message());
    }
    tp->setups_.push_back(frame.setup);
    MNEMO_ASSIGN_OR_RETURN(const TensorShard shard, tensor_shard(c, r, ranks));
    tp->shares_.push_back({0, c.n_layers, shard.kv_begin, shard.kv_end});
  }
  return tp;
}

Status TensorParallel::all_reduce(StageFrame& frame, int32_t il, uint8_t part, std::vector<float>& sum) {
  frame.step = answers_.begin();
  frame.tensor_layer = il;
  frame.tensor_part = part;
  // The pass's KV is all stored after the last layer's attention: replicated then, when a spare
  // could need it.
  const bool replicate = replicates() && part == 0 && il == model_.config().n_layers - 1;
  frame.replicas = replicate ? workers_ : std::vector<std::string>();
  for (size_t r = 0; r < workers_.size(); ++r) {
    const Status sent = link_->send(workers_[r], frame, options_.step_timeout_seconds);
    if (!sent.ok()) return make_error("tensor rank {} ({}): {}", r, workers_[r], sent.error().message());
  }
  MNEMO_RETURN_IF_ERROR(answers_.await(workers_.size(), options_.step_timeout_seconds, "tensor-parallel step"));
  sum.assign(frame.rows.size(), 0.0f);
  for (auto& [rank, share] : answers_.take_arrived()) {  // in rank order
    if (share.rows.size() != sum.size()) {
      return make_error("tensor rank {} answered {} floats, not {}", rank, share.rows.size(), sum.size());
    }
    kernels::add_inplace(sum.data(), share.rows.data(), static_cast<int64_t>(sum.size()));
  }
  return ok_status();
}

Status TensorParallel::run_layers(const Batch& batch, std::span<float> x) {
  if (!replicates()) return run_pass(batch, x);  // no spare: a lost rank cannot be replaced
  const std::vector<float> input(x.begin(), x.end());  // a failed pass runs again from here
  bool first = true;
  return with_repair([&] {
    if (!first) std::copy(input.begin(), input.end(), x.begin());
    first = false;
    return run_pass(batch, x);
  });
}

Status TensorParallel::run_pass(const Batch& batch, std::span<float> x) {
  const ModelConfig& c = model_.config();
  const int64_t n = c.n_embd;
  const int64_t rows = static_cast<int64_t>(x.size()) / n;
  // One frame for the pass: its sequences go out with every block; the rows are each block's input.
  StageFrame frame;
  frame.kind = StageFrameKind::kTensorRows;
  frame.route = {link_->endpoint()};
  frame.n_embd = c.n_embd;
  frame.sequences = frame_sequences(batch, 0, batch.sequences.size());
  frame.rows.resize(x.size());
  std::vector<float> sum;
  for (int32_t il = 0; il < c.n_layers; ++il) {
    const LayerWeights& w = model_.weights().layers[static_cast<size_t>(il)];
    for (uint8_t part = 0; part < 2; ++part) {
      const Vector& norm = part == 0 ? w.attn_norm : w.ffn_norm;
      for (int64_t r = 0; r < rows; ++r) kernels::rms_norm(x.data() + r * n, norm, frame.rows.data() + r * n, n, c.rms_eps);
      MNEMO_RETURN_IF_ERROR(all_reduce(frame, il, part, sum));
      const Vector& post = part == 0 ? w.post_attn_norm : w.post_ffn_norm;
      for (int64_t r = 0; r < rows; ++r) {
        float* share = sum.data() + r * n;
        if (c.has_post_norms) kernels::rms_norm(share, post, share, n, c.rms_eps);
        if (c.residual_scale != 1.0f) {
          for (int64_t i = 0; i < n; ++i) share[i] *= c.residual_scale;
        }
        kernels::add_inplace(x.data() + r * n, share, n);
      }
    }
  }
  return ok_status();
}

}  // namespace mnemo::parallel

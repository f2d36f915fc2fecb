#include "parallel/pipeline.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "parallel/model_fingerprint.h"

namespace mnemo::parallel {

std::vector<std::pair<int32_t, int32_t>> split_layers(int32_t n_layers, int32_t stages) {
  std::vector<std::pair<int32_t, int32_t>> ranges;
  int32_t begin = 0;
  for (int32_t s = 0; s < stages; ++s) {
    const int32_t n = n_layers / stages + (s < n_layers % stages ? 1 : 0);
    ranges.emplace_back(begin, begin + n);
    begin += n;
  }
  return ranges;
}

std::vector<std::pair<size_t, size_t>> split_microbatches(const Batch& batch, int32_t parts) {
  const size_t n = batch.sequences.size();
  size_t total = 0;
  for (const SequenceInput& s : batch.sequences) total += s.tokens.size();
  std::vector<std::pair<size_t, size_t>> groups;
  const size_t wanted = std::clamp<size_t>(static_cast<size_t>(std::max(parts, 1)), 1, std::max<size_t>(n, 1));
  size_t first = 0;
  size_t tokens = 0;
  for (size_t s = 0; s + 1 < n && groups.size() + 1 < wanted; ++s) {
    tokens += batch.sequences[s].tokens.size();
    // Cut after s once this group has its share of the tokens, or when each group still to
    // come must have one of the sequences left.
    const size_t groups_after = wanted - groups.size() - 1;
    const size_t sequences_after = n - s - 1;
    const bool share_reached = tokens * wanted >= total * (groups.size() + 1);
    if (sequences_after >= groups_after && (share_reached || sequences_after == groups_after)) {
      groups.emplace_back(first, s + 1);
      first = s + 1;
    }
  }
  if (first < n) groups.emplace_back(first, n);
  return groups;
}

Result<std::unique_ptr<Pipeline>> Pipeline::connect(const std::string& model_path, const Model& model, int32_t block_size,
                                                    DType kv_dtype, int32_t n_blocks, const PipelineOptions& options) {
  if (options.stages.empty()) return make_error("a pipeline needs at least one stage");
  const int32_t n_layers = model.config().n_layers;
  if (static_cast<int32_t>(options.stages.size()) > n_layers) {
    return make_error("{} stages for a model of {} layers: at least one layer per stage", options.stages.size(), n_layers);
  }
  MNEMO_ASSIGN_OR_RETURN(const uint64_t fingerprint, stage_model_fingerprint(model_path));
  std::unique_ptr<Pipeline> pipeline(new Pipeline(options));
  MNEMO_RETURN_IF_ERROR(pipeline->listen(options.host, options.cluster_secret));
  if (!options.spares.empty() && options.stages.size() < 2) {
    return make_error("spares replace a stage from its replica on another: a pipeline of one stage has none");
  }
  const auto ranges = split_layers(n_layers, static_cast<int32_t>(options.stages.size()));
  for (size_t i = 0; i < options.stages.size(); ++i) {
    StageFrame frame;
    frame.kind = StageFrameKind::kSetup;
    frame.setup = {fingerprint, ranges[i].first, ranges[i].second, block_size, n_blocks, kv_dtype};
    const Status status = pipeline->link_->send(options.stages[i], frame, options.setup_timeout_seconds);
    if (!status.ok()) {
      return make_error("pipeline stage {} ({}, layers [{}, {})): {}", i, options.stages[i], ranges[i].first, ranges[i].second,
                        status.error().message());
    }
    pipeline->setups_.push_back(frame.setup);
    pipeline->shares_.push_back({ranges[i].first, ranges[i].second, 0, model.config().n_kv_heads});
  }
  return pipeline;
}

Status Pipeline::run_layers(const Batch& batch, std::span<float> x) {
  // A failed pass leaves x as it was (the rows come back into it only when all are in), so it
  // can run again once a lost stage is replaced.
  // At most one replacement per stage for one pass: a pass that keeps failing on fresh stages
  // has another cause.
  return with_repair([&] { return run_pass(batch, x); });
}

Status Pipeline::run_pass(const Batch& batch, std::span<float> x) {
  const size_t n_stages = workers_.size();
  const int32_t parts = options_.microbatches > 0 ? options_.microbatches : static_cast<int32_t>(n_stages);
  const auto groups = split_microbatches(batch, parts);
  const uint64_t step = answers_.begin();
  size_t total_tokens = 0;
  for (const SequenceInput& s : batch.sequences) total_tokens += s.tokens.size();
  const size_t n_embd = x.size() / std::max<size_t>(1, total_tokens);
  std::vector<size_t> first_row;  // per microbatch, its first row in x
  size_t row = 0;
  std::vector<std::string> route(workers_.begin() + 1, workers_.end());
  route.push_back(link_->endpoint());
  std::vector<std::string> replicas;  // stage i's KV is kept by stage i + 1 (the last's by the first)
  for (size_t i = 0; n_stages > 1 && i < n_stages; ++i) replicas.push_back(workers_[(i + 1) % n_stages]);
  for (size_t m = 0; m < groups.size(); ++m) {
    StageFrame frame;
    frame.kind = StageFrameKind::kRows;
    frame.step = step;
    frame.microbatch = static_cast<uint32_t>(m);
    frame.route = route;
    frame.replicas = replicas;
    frame.n_embd = static_cast<int32_t>(n_embd);
    frame.sequences = frame_sequences(batch, groups[m].first, groups[m].second);
    size_t tokens = 0;
    for (const SequenceInput& seq : frame.sequences) tokens += seq.tokens.size();
    first_row.push_back(row);
    frame.rows.assign(x.begin() + static_cast<std::ptrdiff_t>(row * n_embd),
                      x.begin() + static_cast<std::ptrdiff_t>((row + tokens) * n_embd));
    row += tokens;
    const Status sent = link_->send(workers_[0], frame, options_.step_timeout_seconds);
    if (!sent.ok()) return make_error("pipeline pass {}: stage 0 ({}): {}", step, workers_[0], sent.error().message());
  }
  MNEMO_RETURN_IF_ERROR(answers_.await(groups.size(), options_.step_timeout_seconds, "pipeline pass"));
  for (auto& [m, frame] : answers_.take_arrived()) {
    const size_t expected = (m + 1 < first_row.size() ? first_row[m + 1] : row) - first_row[m];
    if (m >= groups.size() || frame.rows.size() != expected * n_embd) {
      return make_error("pipeline pass {}: microbatch {} came back with {} floats, not {}", step, m, frame.rows.size(),
                        expected * n_embd);
    }
    std::memcpy(x.data() + first_row[m] * n_embd, frame.rows.data(), frame.rows.size() * sizeof(float));
  }
  return ok_status();
}

}  // namespace mnemo::parallel

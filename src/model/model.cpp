#include "model/model.h"

namespace mnemo {

Result<std::unique_ptr<Model>> Model::load(const std::string& path, const LoadOptions& options) {
  MNEMO_ASSIGN_OR_RETURN(gguf::File file, gguf::File::open(path));
  return from_file(std::move(file), options);
}

Result<std::unique_ptr<Model>> Model::from_file(gguf::File file, const LoadOptions& options) {
  MNEMO_ASSIGN_OR_RETURN(ModelConfig config, read_model_config(file));
  MNEMO_ASSIGN_OR_RETURN(ModelWeights weights, load_weights(file, config, options));
  if (weights.shard.ranks > 1) config = shard_config(config, weights.shard);
  return std::unique_ptr<Model>(new Model(std::move(file), std::move(config), std::move(weights), options));
}

Model::Model(gguf::File file, ModelConfig config, ModelWeights weights, const LoadOptions& options)
    : file_(std::move(file)),
      config_(std::move(config)),
      weights_(std::move(weights)),
      layer_begin_(options.layer_begin),
      layer_end_(options.layer_end < 0 ? config_.n_layers : options.layer_end),
      head_(options.head) {}

KvLayout Model::kv_layout(int32_t block_size, DType kv_dtype) const {
  return kv_layout_of(config_, block_size, kv_dtype);
}

KvLayout Model::stage_kv_layout(int32_t block_size, DType kv_dtype) const {
  KvLayout layout = kv_layout_of(config_, block_size, kv_dtype);
  layout.n_layers = layer_end_ - layer_begin_;
  return layout;
}

Status Model::validate(const Batch& batch, const KvStorage& kv, int32_t kv_layers) const {
  const int32_t block_size = kv.layout().block_size;
  for (size_t s = 0; s < batch.sequences.size(); ++s) {
    const SequenceInput& seq = batch.sequences[s];
    const auto fail = [&](std::string_view what) { return make_error("batch sequence {}: {}", s, what); };
    if (seq.ranges.empty()) return fail("no query range");
    int64_t n_tokens = 0;
    int32_t previous_end = 0;
    for (const QueryRange& r : seq.ranges) {
      if (r.length <= 0 || r.start < previous_end) return fail("query ranges must be non-empty, ascending and disjoint");
      if (r.end() > config_.context_length) {
        return fail(fmt::format("position {} exceeds the context length {}", r.end() - 1, config_.context_length));
      }
      previous_end = r.end();
      n_tokens += r.length;
    }
    if (n_tokens != static_cast<int64_t>(seq.tokens.size())) {
      return fail(fmt::format("{} tokens for ranges covering {}", seq.tokens.size(), n_tokens));
    }
    for (TokenId t : seq.tokens) {
      if (t < 0 || t >= n_vocab()) return fail(fmt::format("token id {} outside the vocabulary of {}", t, n_vocab()));
    }
    if (!seq.allowed_tokens.empty() &&
        (seq.logits != LogitsFor::kArgmax || static_cast<int64_t>(seq.allowed_tokens.size()) * 64 < int64_t{n_vocab()} + 64)) {
      return fail("an allowed-token mask needs LogitsFor::kArgmax and a padded word per 64 tokens of the vocabulary");
    }
    const int64_t needed_blocks = (previous_end + block_size - 1) / block_size;
    if (static_cast<int64_t>(seq.block_table.size()) < needed_blocks) {
      return fail(fmt::format("block table of {} blocks does not cover position {}", seq.block_table.size(), previous_end - 1));
    }
    for (int64_t b = 0; b < needed_blocks; ++b) {
      const BlockId id = seq.block_table[static_cast<size_t>(b)];
      if (id < 0 || id >= kv.n_blocks()) return fail(fmt::format("block id {} outside the pool", id));
    }
  }
  if (kv.layout().n_layers != kv_layers || kv.layout().n_kv_heads != config_.n_kv_heads ||
      kv.layout().head_dim_k != config_.head_dim_k || kv.layout().head_dim_v != config_.head_dim_v) {
    return make_error("KV pool layout does not match the model");
  }
  return ok_status();
}

}  // namespace mnemo

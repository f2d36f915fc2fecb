#include "support/tensor_shards.h"

#include <gtest/gtest.h>

#include "kernels/nn/ops.h"

namespace mnemo::testing {

std::unique_ptr<InProcessShards> InProcessShards::load(const Model& whole, const std::string& path, int32_t ranks,
                                                       int32_t block_size, DType kv_dtype, int32_t n_blocks, ThreadPool& pool) {
  std::vector<std::unique_ptr<Model>> shards;
  std::vector<std::unique_ptr<KvStorage>> pools;
  for (int32_t r = 0; r < ranks; ++r) {
    LoadOptions o;
    o.head = false;
    o.tensor_rank = r;
    o.tensor_ranks = ranks;
    auto shard = Model::load(path, o);
    EXPECT_TRUE(shard.ok()) << (shard.ok() ? "" : shard.error().message());
    if (!shard.ok()) return nullptr;
    pools.push_back(std::make_unique<KvStorage>((*shard)->stage_kv_layout(block_size, kv_dtype), n_blocks));
    shards.push_back(std::move(*shard));
  }
  return std::make_unique<InProcessShards>(whole, std::move(shards), std::move(pools), pool);
}

Status InProcessShards::run_layers(const Batch& batch, std::span<float> x) {
  const ModelConfig& c = whole_.config();
  const int64_t n = c.n_embd;
  const int64_t rows = static_cast<int64_t>(x.size()) / n;
  std::vector<float> h(x.size()), sum(x.size()), part(x.size());
  for (int32_t il = 0; il < c.n_layers; ++il) {
    const LayerWeights& w = whole_.weights().layers[static_cast<size_t>(il)];
    for (const auto part_kind : {Model::TensorPart::kAttention, Model::TensorPart::kFeedForward}) {
      const bool attention = part_kind == Model::TensorPart::kAttention;
      for (int64_t r = 0; r < rows; ++r) kernels::rms_norm(x.data() + r * n, attention ? w.attn_norm : w.ffn_norm, h.data() + r * n, n, c.rms_eps);
      std::fill(sum.begin(), sum.end(), 0.0f);
      for (size_t s = 0; s < shards_.size(); ++s) {
        MNEMO_RETURN_IF_ERROR(shards_[s]->tensor_partial(batch, il, part_kind, h, part, *pools_[s], pool_));
        kernels::add_inplace(sum.data(), part.data(), static_cast<int64_t>(sum.size()));
      }
      const Vector& post = attention ? w.post_attn_norm : w.post_ffn_norm;
      for (int64_t r = 0; r < rows; ++r) {
        if (c.has_post_norms) kernels::rms_norm(sum.data() + r * n, post, sum.data() + r * n, n, c.rms_eps);
        kernels::add_inplace(x.data() + r * n, sum.data() + r * n, n);
      }
    }
  }
  return ok_status();
}

}  // namespace mnemo::testing

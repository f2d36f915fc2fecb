// Tensor-parallel shards of a model in one process (model/tensor_shard.h), as a LayerRunner:
// the norms and the residual stream are the whole model's, the shards' partial products summed
// in rank order, as parallel/tensor_parallel.h does across processes. For tests of the shards'
// arithmetic apart from the link (tests/model/tensor_shard_test.cpp, tensor_fidelity_test.cpp).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "model/model.h"

namespace mnemo::testing {

class InProcessShards : public LayerRunner {
 public:
  InProcessShards(const Model& whole, std::vector<std::unique_ptr<Model>> shards, std::vector<std::unique_ptr<KvStorage>> pools,
                  ThreadPool& pool)
      : whole_(whole), shards_(std::move(shards)), pools_(std::move(pools)), pool_(pool) {}
  // `ranks` shards of the model at `path`, each with a pool of `n_blocks` blocks; null (and a test
  // failure) if one does not load.
  static std::unique_ptr<InProcessShards> load(const Model& whole, const std::string& path, int32_t ranks, int32_t block_size,
                                               DType kv_dtype, int32_t n_blocks, ThreadPool& pool);

  Status run_layers(const Batch& batch, std::span<float> x) override;
  const KvStorage& pool_of(size_t s) const { return *pools_[s]; }
  const Model& shard(size_t s) const { return *shards_[s]; }

 private:
  const Model& whole_;
  std::vector<std::unique_ptr<Model>> shards_;
  std::vector<std::unique_ptr<KvStorage>> pools_;
  ThreadPool& pool_;
};

}  // namespace mnemo::testing

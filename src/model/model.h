// A loaded model: config and weights over the mapped GGUF, and the forward pass over a ragged
// batch with a paged KV pool. Not thread-safe: one engine thread runs forward() at a time (the
// kernels inside use the thread pool).
//
// Failure behaviour: load() refuses unsupported architectures, missing tensors, wrong shapes and
// types without kernels, naming the file and tensor. forward() validates the batch first and
// returns an Error for an invalid one (bad token id, positions beyond the block table or the
// context, malformed ranges) without touching the KV pool.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "gguf/gguf_file.h"
#include "kernels/cpu/matmul.h"
#include "kv/kv_storage.h"
#include "model/batch.h"
#include "model/config.h"
#include "model/weights.h"
#include "util/result.h"
#include "util/thread_pool.h"

namespace mnemo {

class Model {
 public:
  static Result<std::unique_ptr<Model>> load(const std::string& path, const LoadOptions& options = {});
  // Takes ownership of an already parsed file (tests build models in memory).
  static Result<std::unique_ptr<Model>> from_file(gguf::File file, const LoadOptions& options = {});

  const ModelConfig& config() const { return config_; }
  const gguf::File& file() const { return file_; }
  const ModelWeights& weights() const { return weights_; }
  int32_t n_vocab() const { return static_cast<int32_t>(weights_.output.out_features); }

  KvLayout kv_layout(int32_t block_size, DType kv_dtype = DType::F16) const;

  Status forward(const Batch& batch, KvStorage& kv, ThreadPool& pool, ForwardOutput& out);

 private:
  Model(gguf::File file, ModelConfig config, ModelWeights weights);
  Status validate(const Batch& batch, const KvStorage& kv) const;
  // forward()'s steps (model/forward.cpp).
  struct Pass;
  void embed(Pass& p);
  void attention_block(Pass& p, int32_t il);
  void position_and_store(Pass& p, int32_t il);
  void ffn_block(Pass& p, int32_t il);
  void compute_hidden(Pass& p, ForwardOutput& out);
  void compute_logits(Pass& p, ForwardOutput& out);

  gguf::File file_;
  ModelConfig config_;
  ModelWeights weights_;

  // Activation buffers reused across steps.
  struct Scratch {
    std::vector<float> x, h, q, k, v, attn, gate, up, ffn, logits_in;
    kernels::MatmulScratch matmul;
    std::vector<uint8_t> argmax_only;  // per logits row
    std::vector<const uint64_t*> argmax_masks;  // per logits row, when any has a mask
    kernels::ArgmaxRows argmax;
  } scratch_;
};

}  // namespace mnemo

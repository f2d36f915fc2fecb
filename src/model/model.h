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
#include <span>
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

// Runs a model's layers elsewhere (the stages of a pipeline, src/parallel/): `x` holds the
// batch's rows of the residual stream (one per token, n_embd floats, in batch order) after the
// embedding; run_layers leaves them after the last layer. The forward pass goes on with the
// output norm and projection. An error fails the pass.
class LayerRunner {
 public:
  virtual ~LayerRunner() = default;
  virtual Status run_layers(const Batch& batch, std::span<float> x) = 0;
};

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

  // The whole pass: embedding, every layer (here, or by the layer runner when one is set), and
  // the output. Needs the head, and every layer unless a runner runs them.
  Status forward(const Batch& batch, KvStorage& kv, ThreadPool& pool, ForwardOutput& out);

  // A pipeline stage's part: the layers this model holds (LoadOptions' range) over `x`, the
  // batch's rows as the layer before the range left them; leaves them as its last layer does.
  // `kv` holds only these layers (stage_kv_layout). Bit for bit what forward() computes for
  // these rows and layers.
  Status run_layers(const Batch& batch, std::span<float> x, KvStorage& kv, ThreadPool& pool);
  int32_t layer_begin() const { return layer_begin_; }
  int32_t layer_end() const { return layer_end_; }
  // The KV pool's layout for the layers this model holds.
  KvLayout stage_kv_layout(int32_t block_size, DType kv_dtype = DType::F16) const;

  // A tensor-parallel shard's part of layer `il` (LoadOptions::tensor_rank/tensor_ranks,
  // model/tensor_shard.h): `h` holds the rows the block reads (attn_norm(x) or ffn_norm(x), n_embd
  // floats a token), `out` gets this shard's share of the block's output projection, which the
  // shards' shares sum to. The attention stores this shard's KV heads into `kv` (a pool of
  // stage_kv_layout: the shard's KV heads, the layers this model holds).
  enum class TensorPart { kAttention, kFeedForward };
  Status tensor_partial(const Batch& batch, int32_t il, TensorPart part, std::span<const float> h, std::span<float> out,
                        KvStorage& kv, ThreadPool& pool);

  // Not owned; null: the layers run here. Set before the first forward().
  void set_layer_runner(LayerRunner* runner) { layer_runner_ = runner; }

 private:
  Model(gguf::File file, ModelConfig config, ModelWeights weights, const LoadOptions& options);
  // `kv_layers`: the layers the pool must hold.
  Status validate(const Batch& batch, const KvStorage& kv, int32_t kv_layers) const;
  // forward()'s steps (model/forward.cpp).
  struct Pass;
  void flatten(Pass& p);
  void prepare(Pass& p);
  Status begin_pass_over(Pass& p, std::span<const float> rows, std::vector<float>& into);
  void embed(Pass& p);
  void run_local_layers(Pass& p, int32_t begin, int32_t end);
  void attention_block(Pass& p, int32_t il);
  void attention_core(Pass& p, int32_t il);
  void ffn_core(Pass& p, int32_t il);
  void position_and_store(Pass& p, int32_t il);
  void ffn_block(Pass& p, int32_t il, int32_t layers_end);
  void compute_hidden(Pass& p, ForwardOutput& out);
  void compute_logits(Pass& p, ForwardOutput& out);

  gguf::File file_;
  ModelConfig config_;
  ModelWeights weights_;
  int32_t layer_begin_ = 0;
  int32_t layer_end_ = 0;
  bool head_ = true;
  LayerRunner* layer_runner_ = nullptr;

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

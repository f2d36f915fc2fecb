// Generation of one sequence at a time over the paged pool: the path `mnemo generate` and the
// fidelity tests use. The serving engine (continuous batching of many sequences) is built on the
// same Model::forward and Sampler.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "engine/sampler.h"
#include "kv/block_allocator.h"
#include "kv/kv_storage.h"
#include "model/model.h"
#include "util/result.h"
#include "util/thread_pool.h"

namespace mnemo {

struct GenerateOptions {
  int32_t max_tokens = 128;
  SamplingParams sampling;
  int32_t prefill_chunk = 512;  // prompt tokens per forward pass
};

struct GenerateStats {
  int32_t prompt_tokens = 0;
  int32_t generated_tokens = 0;
  double prefill_seconds = 0;
  double decode_seconds = 0;
};

class Generator {
 public:
  // The pool holds max_context tokens of KV for the one sequence, in F16 or F32.
  Generator(Model& model, ThreadPool& pool, int32_t max_context, DType kv_dtype = DType::F16,
            int32_t block_size = 16);

  // Runs the prompt, then samples up to max_tokens, calling on_token for each (return false to
  // stop) and stopping after an end-of-generation token (is_eog may be empty).
  Result<std::vector<TokenId>> generate(std::span<const TokenId> prompt, const GenerateOptions& options,
                                        const std::function<bool(TokenId)>& on_token,
                                        const std::function<bool(TokenId)>& is_eog);

  const GenerateStats& stats() const { return stats_; }

 private:
  Model& model_;
  ThreadPool& pool_;
  int32_t max_context_;
  KvStorage kv_;
  Sampler sampler_;
  GenerateStats stats_;
};

}  // namespace mnemo

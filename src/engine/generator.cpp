#include "engine/generator.h"

#include <algorithm>
#include <chrono>
#include <numeric>

namespace mnemo {
namespace {
double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}
}  // namespace

Generator::Generator(Model& model, ThreadPool& pool, int32_t max_context, DType kv_dtype, int32_t block_size)
    : model_(model),
      pool_(pool),
      max_context_(max_context),
      kv_(model.kv_layout(block_size, kv_dtype), (max_context + block_size - 1) / block_size) {}

Result<std::vector<TokenId>> Generator::generate(std::span<const TokenId> prompt, const GenerateOptions& options,
                                                 const std::function<bool(TokenId)>& on_token,
                                                 const std::function<bool(TokenId)>& is_eog) {
  stats_ = {};
  if (prompt.empty()) return make_error("generate: the prompt is empty");
  const int64_t total = static_cast<int64_t>(prompt.size()) + options.max_tokens;
  if (total > max_context_) {
    return make_error("generate: prompt of {} tokens plus {} new tokens exceeds the context of {}", prompt.size(),
                      options.max_tokens, max_context_);
  }
  // One sequence owns the whole pool; its block table is the identity.
  SequenceInput seq;
  seq.block_table.resize(static_cast<size_t>(kv_.n_blocks()));
  std::iota(seq.block_table.begin(), seq.block_table.end(), 0);

  std::vector<TokenId> history(prompt.begin(), prompt.end());
  std::vector<TokenId> generated;
  ForwardOutput out;
  Batch batch;

  auto start = std::chrono::steady_clock::now();
  const int32_t n_prompt = static_cast<int32_t>(prompt.size());
  // Greedy without penalties: the model finds the token itself.
  const LogitsFor wanted = samples_argmax(options.sampling) ? LogitsFor::kArgmax : LogitsFor::kLast;
  for (int32_t begin = 0; begin < n_prompt; begin += options.prefill_chunk) {
    const int32_t end = std::min(n_prompt, begin + options.prefill_chunk);
    seq.tokens.assign(prompt.begin() + begin, prompt.begin() + end);
    seq.ranges = {{begin, end - begin}};
    seq.logits = end == n_prompt ? wanted : LogitsFor::kNone;
    batch.sequences = {seq};
    MNEMO_RETURN_IF_ERROR(model_.forward(batch, kv_, pool_, out));
  }
  stats_.prompt_tokens = n_prompt;
  stats_.prefill_seconds = seconds_since(start);

  start = std::chrono::steady_clock::now();
  for (int32_t step = 0; step < options.max_tokens; ++step) {
    const TokenId token = out.argmax[0] >= 0 ? out.argmax[0]
                                             : sampler_.sample(options.sampling, {out.last_row(0), static_cast<size_t>(out.n_vocab)},
                                                               history, static_cast<uint64_t>(step));
    generated.push_back(token);
    history.push_back(token);
    ++stats_.generated_tokens;
    if (on_token && !on_token(token)) break;
    if (is_eog && is_eog(token)) break;
    if (step + 1 == options.max_tokens) break;
    seq.tokens = {token};
    seq.ranges = {{static_cast<int32_t>(history.size()) - 1, 1}};
    seq.logits = wanted;
    batch.sequences = {seq};
    MNEMO_RETURN_IF_ERROR(model_.forward(batch, kv_, pool_, out));
  }
  stats_.decode_seconds = seconds_since(start);
  return generated;
}

}  // namespace mnemo

// Token sampling, in llama.cpp's common-sampler order:
//   penalties -> top-k -> top-p -> min-p -> temperature -> one random draw.
//
// Token i of a request depends only on (params incl. seed, i, logits, history): its one uniform
// number is a hash of (seed, i), so batch composition, timing and the order in which requests are
// sampled never change what a request generates. A Sampler keeps only scratch buffers between
// calls; use one per thread.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "util/result.h"

namespace mnemo {

struct SamplingParams {
  float temperature = 1.0f;         // <= 0: greedy (argmax; ties -> lowest id)
  int32_t top_k = 0;                // 0: off
  float top_p = 1.0f;               // 1: off
  float min_p = 0.0f;               // 0: off
  float repetition_penalty = 1.0f;  // 1: off (CTRL style: divide positive logits, multiply negative)
  float presence_penalty = 0.0f;    // OpenAI semantics: subtract once if the token appeared
  float frequency_penalty = 0.0f;   // OpenAI semantics: subtract count * value
  int32_t penalty_last_n = 64;      // window of previous tokens for penalties; -1: all; 0: none
  uint64_t seed = 0;
  // OpenAI's logit_bias: added to a token's logit (after the penalties, before temperature and
  // the cuts). Sorted by token, each token once.
  std::vector<std::pair<int32_t, float>> logit_bias;
};

// Whether sample() with these parameters returns the index of the largest raw logit whatever the
// history (greedy, no penalty), so that the model need only find that index (LogitsFor::kArgmax).
bool samples_argmax(const SamplingParams& params);

// For the API layer: an Error naming the first parameter out of its range. The sampler itself
// copes with any values (never crashes, always returns a token), but their meaning is undefined.
Status validate(const SamplingParams& params);

struct TokenCandidate {
  int32_t token = 0;
  float logit = 0.0f;
};

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;
};

// OpenAI-style logprobs: the chosen token's and the `top_n` most likely alternatives'.
struct Logprobs {
  TokenLogprob chosen;
  std::vector<TokenLogprob> top;  // most likely first; ties -> lowest id first
};

// The uniform number in [0, 1) that decides token `step` of a request seeded with `seed`.
double sampling_uniform(uint64_t seed, uint64_t step);

class Sampler {
 public:
  // step: index of the token being generated within its request (0 for the first token).
  // history: tokens seen so far by this request (prompt + generated), for the penalties.
  // logits must not be empty. NaN logits count as -inf, +inf as the largest float.
  // allowed: TokenMask's words (util/token_mask.h), the only tokens that may be drawn (empty:
  // all); the others count as -inf, penalties and logit_bias included. 0 when it holds none.
  int32_t sample(const SamplingParams& params, std::span<const float> logits, std::span<const int32_t> history,
                 uint64_t step, std::span<const uint64_t> allowed = {});

  // The tokens that survive penalties, top-k, top-p and min-p, with their penalised logits before
  // temperature: what sample() draws from. Ranked (best first) when top-k or top-p ran, else in
  // id order. Valid until the next call.
  std::span<const TokenCandidate> candidates(const SamplingParams& params, std::span<const float> logits,
                                             std::span<const int32_t> history, std::span<const uint64_t> allowed = {});

  // Log-probabilities (log-softmax of the raw logits, no penalties or temperature) of `token` and
  // of the `top_n` most likely tokens. -inf for a token outside the vocabulary, or when every
  // logit is -inf (then `top` is empty).
  Logprobs logprobs(std::span<const float> logits, int32_t token, int32_t top_n);

 private:
  // The logits that differ from the model's, by token id, into penalized_: the penalties of
  // repeated tokens, then logit_bias.
  void apply_penalties(const SamplingParams& params, std::span<const float> logits,
                       std::span<const int32_t> history);
  void penalize(const SamplingParams& params, std::span<const float> logits, std::span<const int32_t> history);
  void add_bias(std::span<const std::pair<int32_t, float>> bias, std::span<const float> logits);
  void gather_all(std::span<const float> logits);
  void gather_top_k(std::span<const float> logits, std::span<const TokenCandidate> overrides, size_t k);
  void apply_top_p(float top_p, float min_p, bool ranked);
  void apply_min_p(float min_p);
  int32_t draw(float temperature, double uniform);
  // The draw over the whole vocabulary (no penalty or cut), without gathering candidates: the
  // weights by the SIMD kernel (kernels/nn/exp_weights.h), summed in its fixed lanes, and the
  // token found lane by lane (tokens l, l + 16, ... form lane l). The same distribution as draw(),
  // the same token for a seed on every machine, not the same token as draw() for that seed.
  int32_t draw_from_all(float temperature, std::span<const float> logits, double uniform);

  std::span<const uint64_t> allowed_;       // this call's mask (sample's or candidates'), read by the gathers
  std::vector<int32_t> window_;             // the penalty window, sorted to count repeats
  std::vector<TokenCandidate> penalized_;   // penalised (and biased) logits, by token id
  std::vector<TokenCandidate> merged_;      // add_bias's scratch
  std::vector<TokenCandidate> candidates_;  // the survivors of each stage
  std::vector<float> weights_;              // unnormalised probabilities for the draw
};

}  // namespace mnemo

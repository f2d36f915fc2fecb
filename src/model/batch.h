// The ragged batch one forward pass runs (SPEC V1, V2, P5, P6, P7). There is no separate
// prefill path: each sequence contributes the tokens it needs computed now, at their positions,
// with the block table of its whole context.
//
//   positions of one sequence:  [ cached KV ............ | query range(s) run now ]
//   decode step:                one range of 1 token at position = context length - 1
//   prefill chunk:              one range of n tokens
//   dropped prefix (P5):        two ranges, [0, p) recomputed and [c, c + n) new, over one block
//                               table whose blocks for [p, c) still hold cached KV
//
// A query token at position t attends to every position <= t (within the sliding window on
// local layers); the KV of this batch's tokens is written to the pool before attention runs.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "kv/kv_layout.h"

namespace mnemo {

using TokenId = int32_t;

struct QueryRange {
  int32_t start = 0;   // position of the first token
  int32_t length = 0;  // number of consecutive positions
  int32_t end() const { return start + length; }
};

// kArgmax: only the index of the last token's largest logit (greedy sampling with nothing that
// alters the logits), which spares writing and reading a vocabulary of logits per sequence.
// kArgmaxAll: that index for every token run (greedy verification of a speculative draft).
// kHidden: no logits, the final-normed hidden state of every token run (embeddings).
enum class LogitsFor { kNone, kLast, kAll, kArgmax, kArgmaxAll, kHidden };

struct SequenceInput {
  std::vector<TokenId> tokens;      // the ranges' tokens, concatenated in range order
  std::vector<QueryRange> ranges;   // ascending and disjoint
  std::vector<BlockId> block_table;  // logical block i -> pool block; covers every position <= the last one run
  LogitsFor logits = LogitsFor::kLast;
  // kArgmax only: the argmax over these tokens alone (util/token_mask.h's words, its padding
  // word included); empty: over every token. Constrained greedy decoding.
  std::span<const uint64_t> allowed_tokens;
};

struct Batch {
  std::vector<SequenceInput> sequences;
  // Called before each layer's attention reads the pool: KV still being copied in (a swap-in
  // layer by layer, SPEC P8) is waited for here, so the copy of layer i overlaps layers < i.
  std::function<void(int32_t layer)> before_attention;
  // Called before each layer writes this batch's KV into the pool: a pool whose layer is still
  // being copied in (a pipeline stage's microbatch swap, SPEC D6) must not have the copy land on
  // top of what the layer stores.
  std::function<void(int32_t layer)> before_layer;
};

// Logits of the tokens that asked for them: rows in batch order (sequence, then token).
struct ForwardOutput {
  int32_t n_vocab = 0;
  std::vector<float> logits;
  std::vector<int32_t> first_row;  // per sequence: index of its first row
  std::vector<int32_t> row_count;  // per sequence: number of rows (a kArgmax(All) sequence's rows are not valid)
  // Per sequence: the index of its last token's largest logit (kernels/nn/argmax.h's semantics)
  // for kArgmax and kArgmaxAll, -1 otherwise.
  std::vector<TokenId> argmax;
  // Per logits row: that index for the rows of kArgmax and kArgmaxAll sequences, -1 for others.
  std::vector<TokenId> row_argmax;
  TokenId argmax_of(size_t sequence, int32_t i) const { return row_argmax[static_cast<size_t>(first_row[sequence] + i)]; }
  // kHidden: the final-normed hidden states (n_embd floats a token) of every token the sequence
  // ran, in batch order, from row hidden_first[sequence] (-1 for the other sequences).
  int32_t n_embd = 0;
  std::vector<float> hidden;
  std::vector<int32_t> hidden_first;
  const float* hidden_row(size_t sequence, int32_t i) const {
    return hidden.data() + static_cast<size_t>(hidden_first[sequence] + i) * static_cast<size_t>(n_embd);
  }

  const float* row(size_t sequence, int32_t i = 0) const {
    return logits.data() + static_cast<size_t>(first_row[sequence] + i) * static_cast<size_t>(n_vocab);
  }
  // The logits of the last token of a sequence that asked for kLast (or kAll).
  const float* last_row(size_t sequence) const { return row(sequence, row_count[sequence] - 1); }
};

}  // namespace mnemo

// The batched, paged forward equals the plain unpaged reference (tests/support/reference_forward)
// on tiny synthetic models of every architecture: random block placement, prefill split into
// chunks, mixed prefill and decode in one batch, two query ranges over one block table (SPEC P5),
// sliding windows and GQA.
//
// Tolerance: both paths use the same weight kernels, so differences come from the order of
// floating-point sums in attention (online vs two-pass softmax), amplified when an activation
// lands on the other side of an 8-bit rounding boundary. We require max |diff| <= 2e-2 * max
// |logit| and mean |diff| <= 1e-3 * max |logit|; a wrong position, block or mask moves
// logits by O(max |logit|) and fails by orders of magnitude.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>

#include "model/model.h"
#include "support/reference_forward.h"
#include "support/tiny_model.h"

namespace mnemo {
namespace {

using testing::TinyModelSpec;

constexpr int32_t kBlockSize = 4;
constexpr int32_t kPoolBlocks = 256;

struct Fixture {
  std::unique_ptr<Model> model;
  std::vector<TokenId> tokens;
  std::vector<float> reference;  // [tokens x vocab]
};

Fixture make_fixture(const TinyModelSpec& spec, DType kv_dtype, const std::string& name, int32_t n_tokens,
                     ThreadPool& pool) {
  Fixture f;
  const std::string path = testing::write_tiny_model(spec, name);
  auto model = Model::load(path);
  EXPECT_TRUE(model.ok()) << model.error().message();
  std::remove(path.c_str());  // the mapping keeps the data alive
  f.model = std::move(*model);
  std::mt19937 rng(static_cast<uint32_t>(spec.seed) + 7);
  std::uniform_int_distribution<TokenId> dist(0, spec.n_vocab - 1);
  for (int32_t i = 0; i < n_tokens; ++i) f.tokens.push_back(dist(rng));
  f.reference = testing::reference_forward(*f.model, f.tokens, kv_dtype, pool);
  return f;
}

// Pool blocks handed out in a shuffled order, so logical and physical blocks never line up.
class ShuffledBlocks {
 public:
  explicit ShuffledBlocks(uint32_t seed) : ids_(kPoolBlocks) {
    std::iota(ids_.begin(), ids_.end(), 0);
    std::shuffle(ids_.begin(), ids_.end(), std::mt19937(seed));
  }
  std::vector<BlockId> take(int32_t n) {
    std::vector<BlockId> out(ids_.begin() + next_, ids_.begin() + next_ + n);
    next_ += n;
    return out;
  }

 private:
  std::vector<BlockId> ids_;
  int32_t next_ = 0;
};

void expect_rows_match(const Fixture& f, const float* logits, int32_t first_position, int32_t n_rows,
                       const std::string& what) {
  const int32_t V = f.model->n_vocab();
  float max_ref = 0.0f;
  for (float v : f.reference) max_ref = std::max(max_ref, std::abs(v));
  float max_diff = 0.0f;
  double sum_diff = 0.0;
  for (int32_t r = 0; r < n_rows; ++r) {
    for (int32_t i = 0; i < V; ++i) {
      const float expected = f.reference[static_cast<size_t>((first_position + r) * V + i)];
      const float diff = std::abs(logits[static_cast<size_t>(r * V + i)] - expected);
      max_diff = std::max(max_diff, diff);
      sum_diff += diff;
    }
  }
  const double mean_diff = sum_diff / (static_cast<double>(n_rows) * V);
  EXPECT_LE(max_diff, 2e-2f * max_ref) << what;
  EXPECT_LE(mean_diff, 1e-3 * max_ref) << what;
}

SequenceInput one_range(const Fixture& f, int32_t start, int32_t length, std::vector<BlockId> table, LogitsFor logits) {
  SequenceInput s;
  s.tokens.assign(f.tokens.begin() + start, f.tokens.begin() + start + length);
  s.ranges = {{start, length}};
  s.block_table = std::move(table);
  s.logits = logits;
  return s;
}

struct Case {
  TinyModelSpec spec;
  DType kv_dtype;
};

void PrintTo(const Case& c, std::ostream* os) {
  testing::PrintTo(c.spec, os);
  *os << " kv " << dtype_name(c.kv_dtype);
}

class PagedForwardTest : public ::testing::TestWithParam<Case> {
 protected:
  const TinyModelSpec& spec() const { return GetParam().spec; }
  KvLayout layout(const Model& model) const { return model.kv_layout(kBlockSize, GetParam().kv_dtype); }
  Fixture fixture(const std::string& name, int32_t n_tokens) {
    return make_fixture(spec(), GetParam().kv_dtype, name, n_tokens, pool_);
  }
  ThreadPool pool_{2};
};

TEST_P(PagedForwardTest, WholePromptInOnePass) {
  const Fixture f = fixture("whole", 40);
  KvStorage kv(layout(*f.model), kPoolBlocks);
  ShuffledBlocks blocks(1);
  Batch batch;
  batch.sequences.push_back(one_range(f, 0, 40, blocks.take(10), LogitsFor::kAll));
  ForwardOutput out;
  ASSERT_TRUE(f.model->forward(batch, kv, pool_, out).ok());
  ASSERT_EQ(out.row_count[0], 40);
  expect_rows_match(f, out.row(0), 0, 40, "whole prompt");
}

TEST_P(PagedForwardTest, PrefillInChunksThenDecode) {
  const Fixture f = fixture("chunks", 40);
  KvStorage kv(layout(*f.model), kPoolBlocks);
  ShuffledBlocks blocks(2);
  const std::vector<BlockId> table = blocks.take(10);
  ForwardOutput out;
  // Chunks of uneven sizes that start and end mid-block, then single-token decode steps.
  const std::vector<std::pair<int32_t, int32_t>> steps = {{0, 7}, {7, 13}, {20, 5}, {25, 1}, {26, 1}, {27, 9}, {36, 1}, {37, 1}, {38, 1}, {39, 1}};
  for (const auto& [start, length] : steps) {
    Batch batch;
    batch.sequences.push_back(one_range(f, start, length, table, LogitsFor::kAll));
    ASSERT_TRUE(f.model->forward(batch, kv, pool_, out).ok());
    expect_rows_match(f, out.row(0), start, length, "chunk at " + std::to_string(start));
  }
}

TEST_P(PagedForwardTest, MixedPrefillAndDecodeInOneBatch) {
  // Three sequences with different tokens advance together: one decodes while another is still
  // in prefill; each checks against the reference of its own token stream.
  const Fixture base = fixture("mixed", 1);
  std::vector<std::vector<TokenId>> streams(3);
  std::vector<std::vector<float>> references(3);
  std::mt19937 rng(11);
  std::uniform_int_distribution<TokenId> dist(0, base.model->n_vocab() - 1);
  for (int s = 0; s < 3; ++s) {
    for (int i = 0; i < 30; ++i) streams[static_cast<size_t>(s)].push_back(dist(rng));
    references[static_cast<size_t>(s)] =
        testing::reference_forward(*base.model, streams[static_cast<size_t>(s)], GetParam().kv_dtype, pool_);
  }
  KvStorage kv(layout(*base.model), kPoolBlocks);
  ShuffledBlocks blocks(3);
  std::vector<std::vector<BlockId>> tables = {blocks.take(8), blocks.take(8), blocks.take(8)};
  // Per step, how many tokens each sequence runs (0: sits out): A prefills 12 then decodes, B
  // starts late with a long prefill, C alternates chunk sizes.
  const std::vector<std::array<int32_t, 3>> plan = {
      {12, 0, 5}, {1, 20, 3}, {1, 1, 9}, {1, 1, 1}, {15, 8, 12}};
  std::array<int32_t, 3> done = {0, 0, 0};
  for (const auto& step : plan) {
    Batch batch;
    std::vector<int> members;
    for (int s = 0; s < 3; ++s) {
      const int32_t n = step[static_cast<size_t>(s)];
      if (n == 0) continue;
      SequenceInput in;
      const auto& stream = streams[static_cast<size_t>(s)];
      in.tokens.assign(stream.begin() + done[static_cast<size_t>(s)], stream.begin() + done[static_cast<size_t>(s)] + n);
      in.ranges = {{done[static_cast<size_t>(s)], n}};
      in.block_table = tables[static_cast<size_t>(s)];
      in.logits = LogitsFor::kAll;
      batch.sequences.push_back(std::move(in));
      members.push_back(s);
    }
    ForwardOutput out;
    ASSERT_TRUE(base.model->forward(batch, kv, pool_, out).ok());
    for (size_t m = 0; m < members.size(); ++m) {
      const int s = members[m];
      const int32_t n = step[static_cast<size_t>(s)];
      const int32_t V = base.model->n_vocab();
      float max_ref = 0.0f;
      for (float v : references[static_cast<size_t>(s)]) max_ref = std::max(max_ref, std::abs(v));
      float max_diff = 0.0f;
      for (int32_t r = 0; r < n; ++r) {
        for (int32_t i = 0; i < V; ++i) {
          const float expected = references[static_cast<size_t>(s)][static_cast<size_t>((done[static_cast<size_t>(s)] + r) * V + i)];
          max_diff = std::max(max_diff, std::abs(out.row(m, r)[i] - expected));
        }
      }
      EXPECT_LE(max_diff, 2e-2f * max_ref) << "sequence " << s << " at " << done[static_cast<size_t>(s)];
    }
    for (int s = 0; s < 3; ++s) done[static_cast<size_t>(s)] += step[static_cast<size_t>(s)];
  }
}

TEST_P(PagedForwardTest, TwoQueryRangesRecomputeADroppedPrefix) {
  // Pensieve P5: the KV of positions [0, 8) was dropped (blocks 0-1 overwritten), [8, 20) is
  // still cached. One pass runs [0, 8) again and the new tokens [20, 30) over one block table.
  const Fixture f = fixture("ranges", 30);
  KvStorage kv(layout(*f.model), kPoolBlocks);
  ShuffledBlocks blocks(4);
  const std::vector<BlockId> table = blocks.take(8);
  ForwardOutput out;
  Batch first;
  first.sequences.push_back(one_range(f, 0, 20, table, LogitsFor::kNone));
  ASSERT_TRUE(f.model->forward(first, kv, pool_, out).ok());
  std::mt19937 rng(5);
  for (int b = 0; b < 2; ++b) {
    uint8_t* data = kv.block(table[static_cast<size_t>(b)]);
    for (size_t i = 0; i < kv.layout().block_bytes(); ++i) data[i] = static_cast<uint8_t>(rng() & 0x3b);
  }
  SequenceInput both;
  both.tokens.assign(f.tokens.begin(), f.tokens.begin() + 8);
  both.tokens.insert(both.tokens.end(), f.tokens.begin() + 20, f.tokens.begin() + 30);
  both.ranges = {{0, 8}, {20, 10}};
  both.block_table = table;
  both.logits = LogitsFor::kAll;
  Batch second;
  second.sequences.push_back(both);
  ASSERT_TRUE(f.model->forward(second, kv, pool_, out).ok());
  ASSERT_EQ(out.row_count[0], 18);
  expect_rows_match(f, out.row(0, 0), 0, 8, "recomputed prefix");
  expect_rows_match(f, out.row(0, 8), 20, 10, "new tokens after the cached middle");
}

TEST_P(PagedForwardTest, InvalidBatchIsRefusedWithoutTouchingThePool) {
  const Fixture f = fixture("invalid", 8);
  KvStorage kv(layout(*f.model), 4);
  const std::vector<uint8_t> before(kv.block(0), kv.block(0) + 4 * kv.layout().block_bytes());
  ForwardOutput out;
  const auto expect_refused = [&](SequenceInput in, const std::string& needle) {
    Batch batch;
    batch.sequences.push_back(std::move(in));
    const Status s = f.model->forward(batch, kv, pool_, out);
    ASSERT_FALSE(s.ok()) << needle;
    EXPECT_NE(s.error().message().find(needle), std::string::npos) << s.error().message();
  };
  SequenceInput good = one_range(f, 0, 8, {0, 1}, LogitsFor::kLast);
  SequenceInput bad = good;
  bad.tokens[3] = f.model->n_vocab();
  expect_refused(bad, "outside the vocabulary");
  bad = good;
  bad.block_table = {0};
  expect_refused(bad, "does not cover");
  bad = good;
  bad.block_table = {0, 9};
  expect_refused(bad, "outside the pool");
  bad = good;
  bad.ranges = {{0, 4}, {2, 4}};
  expect_refused(bad, "disjoint");
  bad = good;
  bad.ranges = {{0, 7}};
  expect_refused(bad, "tokens for ranges");
  bad = good;
  bad.ranges = {{f.model->config().context_length - 4, 8}};
  bad.block_table.assign(static_cast<size_t>(f.model->config().context_length / kBlockSize + 2), 0);
  expect_refused(bad, "context length");
  const std::vector<uint8_t> after(kv.block(0), kv.block(0) + 4 * kv.layout().block_bytes());
  EXPECT_EQ(before, after);
}

TinyModelSpec llama_spec() { return TinyModelSpec{}; }
TinyModelSpec qwen2_spec() {
  TinyModelSpec s;
  s.qkv_bias = true;
  s.n_kv_heads = 1;
  s.seed = 2;
  return s;
}
TinyModelSpec gemma3_spec() {
  TinyModelSpec s;
  s.arch = Arch::kGemma3;
  s.seed = 3;
  return s;
}
TinyModelSpec arch_spec(Arch arch, uint64_t seed) {
  TinyModelSpec s;
  s.arch = arch;
  s.seed = seed;
  return s;
}

TEST_P(PagedForwardTest, ArgmaxOnlySequencesGetTheIndexOfTheirLargestLogit) {
  // The same batch twice: once with the first sequence asking only for its greedy token
  // (LogitsFor::kArgmax), once for its logits. The index is that of the largest of those logits,
  // and the other sequences' logits do not change.
  const Fixture f = fixture("argmax", 14);
  const int32_t V = f.model->n_vocab();
  ShuffledBlocks blocks(5);
  const std::vector<std::vector<BlockId>> tables = {blocks.take(2), blocks.take(2), blocks.take(1)};
  std::vector<ForwardOutput> outs(2);
  for (const LogitsFor first : {LogitsFor::kArgmax, LogitsFor::kLast}) {
    KvStorage kv(layout(*f.model), kPoolBlocks);
    Batch batch;
    batch.sequences.push_back(one_range(f, 0, 6, tables[0], first));
    batch.sequences.push_back(one_range(f, 0, 5, tables[1], LogitsFor::kLast));
    batch.sequences.push_back(one_range(f, 0, 3, tables[2], LogitsFor::kAll));
    ASSERT_TRUE(f.model->forward(batch, kv, pool_, outs[first == LogitsFor::kLast ? 1 : 0]).ok());
  }
  const ForwardOutput& folded = outs[0];
  const ForwardOutput& full = outs[1];
  const float* logits = full.last_row(0);
  int32_t expected = 0;
  for (int32_t i = 1; i < V; ++i) expected = logits[i] > logits[expected] ? i : expected;
  EXPECT_EQ(folded.argmax, (std::vector<TokenId>{expected, -1, -1}));
  EXPECT_EQ(full.argmax, (std::vector<TokenId>{-1, -1, -1}));
  ASSERT_EQ(folded.row_count, full.row_count);
  for (size_t s = 1; s < 3; ++s) {
    for (int32_t r = 0; r < full.row_count[s]; ++r) {
      EXPECT_EQ(std::memcmp(folded.row(s, r), full.row(s, r), static_cast<size_t>(V) * sizeof(float)), 0) << s << " " << r;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Architectures, PagedForwardTest,
    ::testing::Values(Case{llama_spec(), DType::F16}, Case{qwen2_spec(), DType::F16}, Case{gemma3_spec(), DType::F16},
                      Case{llama_spec(), DType::F32}, Case{gemma3_spec(), DType::F32},
                      Case{arch_spec(Arch::kQwen3, 4), DType::F16}, Case{arch_spec(Arch::kPhi3, 5), DType::F16},
                      Case{arch_spec(Arch::kSmolLM3, 6), DType::F16}, Case{arch_spec(Arch::kGranite, 7), DType::F16},
                      Case{arch_spec(Arch::kMistral3, 8), DType::F16}, Case{arch_spec(Arch::kPhi3, 9), DType::F32}),
    [](const ::testing::TestParamInfo<Case>& param_info) {
      const TinyModelSpec& s = param_info.param.spec;
      return testing::tiny_arch_name(s) + "_kv_" + std::string(dtype_name(param_info.param.kv_dtype));
    });

}  // namespace
}  // namespace mnemo

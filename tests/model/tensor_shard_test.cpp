// Tensor-parallel shards (model/tensor_shard.h, Model::tensor_partial): how heads and FFN rows
// split (whole KV groups, or a group's query heads with its KV head on each rank that uses it),
// and, in one process, shards whose partial products a reducer sums (in rank order) compute the
// whole model: the first layer's KV of each shard's heads bit for bit (the same dot products),
// and logits inside the tolerance of paged_forward_test (the sums' order differs from one dot
// product's, which an 8-bit activation rounding can amplify).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>

#include "model/model.h"
#include "model/tensor_shard.h"
#include "support/tensor_shards.h"
#include "support/tiny_model.h"

namespace mnemo {
namespace {

using testing::TinyModelSpec;

constexpr int32_t kBlockSize = 4;
constexpr int32_t kPoolBlocks = 32;

ModelConfig heads(int32_t n_heads, int32_t n_kv_heads, int32_t n_ff = 1536) {
  ModelConfig c;
  c.n_heads = n_heads;
  c.n_kv_heads = n_kv_heads;
  c.n_ff = n_ff;
  return c;
}

std::vector<int32_t> ranges(const ModelConfig& c, int32_t ranks, int32_t ff_unit = 1) {
  std::vector<int32_t> out;
  for (int32_t r = 0; r < ranks; ++r) {
    auto s = tensor_shard(c, r, ranks, ff_unit);
    EXPECT_TRUE(s.ok());
    if (!s.ok()) return {};
    out.insert(out.end(), {s->q_begin, s->q_end, s->kv_begin, s->kv_end, s->ff_begin, s->ff_end});
  }
  return out;
}

TEST(TensorShard, HeadsSplitOnKvGroupsOrWithinOneWithItsKvHeadReplicated) {
  // SmolLM2: 9 query heads in 3 groups over 2 ranks: two groups and one.
  EXPECT_EQ(ranges(heads(9, 3), 2, 32), (std::vector<int32_t>{0, 6, 0, 2, 0, 768, 6, 9, 2, 3, 768, 1536}));
  // Gemma 3 270M: 4 query heads, one KV head, on both of 2 ranks.
  EXPECT_EQ(ranges(heads(4, 1, 2048), 2, 256), (std::vector<int32_t>{0, 2, 0, 1, 0, 1024, 2, 4, 0, 1, 1024, 2048}));
  // 8 in 2 groups over 4 ranks: each KV head on two ranks.
  EXPECT_EQ(ranges(heads(8, 2, 1024), 4), (std::vector<int32_t>{0, 2, 0, 1, 0, 256, 2, 4, 0, 1, 256, 512, 4, 6, 1, 2, 512, 768,
                                                                6, 8, 1, 2, 768, 1024}));
  // The FFN split keeps to whole blocks of the down projection: 1536 rows of 256 over 4 ranks.
  EXPECT_EQ(ranges(heads(4, 4, 1536), 4, 256), (std::vector<int32_t>{0, 1, 0, 1, 0, 512, 1, 2, 1, 2, 512, 1024, 2, 3, 2, 3,
                                                                     1024, 1280, 3, 4, 3, 4, 1280, 1536}));
  EXPECT_FALSE(tensor_shard(heads(4, 1), 0, 3).ok());   // 3 ranks cannot share one group of 4
  EXPECT_FALSE(tensor_shard(heads(9, 3), 0, 6).ok());   // 2 ranks per group of 3
  EXPECT_FALSE(tensor_shard(heads(4, 4, 512), 0, 4, 256).ok());  // 2 blocks of FFN rows for 4 ranks
  EXPECT_FALSE(tensor_shard(heads(4, 2), 2, 2).ok());
}

struct Case {
  TinyModelSpec spec;
  int32_t ranks;
};

void PrintTo(const Case& c, std::ostream* os) {
  testing::PrintTo(c.spec, os);
  *os << " over " << c.ranks;
}

class TensorShardForwardTest : public ::testing::TestWithParam<Case> {
 protected:
  ThreadPool pool_{2};
};

TEST_P(TensorShardForwardTest, ShardsSummedInRankOrderComputeTheWholeModel) {
  const Case& c = GetParam();
  const std::string path = testing::write_tiny_model(c.spec, "tensor_shards");
  auto whole = Model::load(path);
  ASSERT_TRUE(whole.ok());
  LoadOptions head_only;
  head_only.layer_end = 0;
  auto coordinator = Model::load(path, head_only);
  ASSERT_TRUE(coordinator.ok());
  auto shards = testing::InProcessShards::load(**whole, path, c.ranks, kBlockSize, DType::F32, kPoolBlocks, pool_);
  std::remove(path.c_str());
  ASSERT_TRUE(shards);
  testing::InProcessShards& runner = *shards;
  (*coordinator)->set_layer_runner(&runner);

  KvStorage whole_kv((*whole)->kv_layout(kBlockSize, DType::F32), kPoolBlocks);
  KvStorage coordinator_kv((*coordinator)->kv_layout(kBlockSize, DType::F32), kPoolBlocks);
  std::mt19937 rng(static_cast<uint32_t>(c.spec.seed));
  std::vector<TokenId> tokens(24);
  for (TokenId& t : tokens) t = static_cast<TokenId>(rng() % static_cast<uint32_t>(c.spec.n_vocab));
  const std::vector<BlockId> table = {5, 1, 9, 14, 3, 22};
  float max_diff = 0.0f, max_logit = 0.0f;
  for (const auto& [start, length] : std::vector<std::pair<int32_t, int32_t>>{{0, 20}, {20, 1}, {21, 1}, {22, 2}}) {
    Batch batch;
    SequenceInput seq;
    seq.tokens.assign(tokens.begin() + start, tokens.begin() + start + length);
    seq.ranges = {{start, length}};
    seq.block_table = table;
    seq.logits = LogitsFor::kAll;
    batch.sequences.push_back(seq);
    ForwardOutput expected, got;
    ASSERT_TRUE((*whole)->forward(batch, whole_kv, pool_, expected).ok());
    const Status status = (*coordinator)->forward(batch, coordinator_kv, pool_, got);
    ASSERT_TRUE(status.ok()) << status.error().message();
    ASSERT_EQ(expected.logits.size(), got.logits.size());
    for (size_t i = 0; i < got.logits.size(); ++i) {
      max_diff = std::max(max_diff, std::abs(got.logits[i] - expected.logits[i]));
      max_logit = std::max(max_logit, std::abs(expected.logits[i]));
    }
  }
  EXPECT_GT(max_logit, 0.0f);
  EXPECT_LE(max_diff, 2e-2f * max_logit);
  // The first layer's KV: each shard's KV heads, exactly the whole model's.
  const KvLayout whole_layout = whole_kv.layout();
  for (int32_t r = 0; r < c.ranks; ++r) {
    const TensorShard& s = runner.shard(static_cast<size_t>(r)).weights().shard;
    for (int32_t h = s.kv_begin; h < s.kv_end; ++h) {
      const size_t bytes = whole_layout.k_head_elems() * whole_layout.element_bytes();
      EXPECT_EQ(std::memcmp(whole_kv.keys(table[0], 0, h), runner.pool_of(static_cast<size_t>(r)).keys(table[0], 0, h - s.kv_begin), bytes), 0)
          << "rank " << r << " KV head " << h;
      EXPECT_EQ(std::memcmp(whole_kv.values(table[0], 0, h), runner.pool_of(static_cast<size_t>(r)).values(table[0], 0, h - s.kv_begin), bytes), 0)
          << "rank " << r << " KV head " << h;
    }
  }
}

std::vector<Case> cases() {
  // FFNs of 1,024 rows: 4 blocks of the K-quant down projections the tiny models use.
  TinyModelSpec llama;  // 4 query heads, 2 KV heads
  llama.n_layers = 3;
  llama.n_ff = 1024;
  TinyModelSpec gemma;
  gemma.arch = Arch::kGemma3;
  gemma.n_kv_heads = 1;
  gemma.n_ff = 1024;
  gemma.seed = 5;
  TinyModelSpec qwen;
  qwen.qkv_bias = true;
  qwen.n_ff = 1024;
  qwen.seed = 2;
  TinyModelSpec smol = llama;  // SmolLM2's heads: 9 query heads in 3 groups, split 6 and 3
  smol.n_heads = 9;
  smol.n_kv_heads = 3;
  smol.seed = 7;
  return {{llama, 2}, {llama, 4}, {gemma, 2}, {qwen, 2}, {smol, 2}, {smol, 3}};
}

INSTANTIATE_TEST_SUITE_P(Shards, TensorShardForwardTest, ::testing::ValuesIn(cases()));

TEST(TensorShardModel, AShardRefusesAWholePassOrWholeLayers) {
  TinyModelSpec spec;
  spec.n_ff = 1024;
  const std::string path = testing::write_tiny_model(spec, "tensor_shard_refusals");
  LoadOptions o;
  o.head = false;
  o.tensor_rank = 1;
  o.tensor_ranks = 2;
  auto shard = Model::load(path, o);
  std::remove(path.c_str());
  ASSERT_TRUE(shard.ok()) << shard.error().message();
  EXPECT_EQ((*shard)->config().n_heads, spec.n_heads / 2);
  ThreadPool pool(1);
  KvStorage kv((*shard)->stage_kv_layout(kBlockSize), kPoolBlocks);
  Batch batch;
  SequenceInput seq;
  seq.tokens = {1};
  seq.ranges = {{0, 1}};
  seq.block_table = {0};
  batch.sequences.push_back(seq);
  std::vector<float> x(static_cast<size_t>(spec.n_embd));
  EXPECT_FALSE((*shard)->run_layers(batch, x, kv, pool).ok());
  ForwardOutput out;
  EXPECT_FALSE((*shard)->forward(batch, kv, pool, out).ok());
  std::vector<float> part(x.size());
  EXPECT_TRUE((*shard)->tensor_partial(batch, 0, Model::TensorPart::kAttention, x, part, kv, pool).ok());
  EXPECT_FALSE((*shard)->tensor_partial(batch, spec.n_layers, Model::TensorPart::kAttention, x, part, kv, pool).ok());
}

}  // namespace
}  // namespace mnemo

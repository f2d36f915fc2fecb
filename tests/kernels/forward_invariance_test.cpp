// Batch invariance of the whole forward pass, bit for bit, on tiny synthetic models of every
// architecture (their layers use F32, F16, BF16, Q4_0, Q5_0, Q8_0, Q4_K, Q5_K and Q6_K weights;
// matmul's own test covers Q4_1 and Q5_1): a token's logits are the same whether its sequence
// runs one token per step alone on one thread, or in prefill chunks of other sizes inside mixed
// batches with other sequences on two threads. This is what lets the serving engine batch
// requests freely and recompute a preempted one without changing its output. (Attention is per
// (token, head) and its context split is fixed by positions; matmul is per row; see matmul.h.)
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>

#include "model/model.h"
#include "support/tiny_model.h"

namespace mnemo {
namespace {

using testing::TinyModelSpec;

constexpr int32_t kBlockSize = 4;
constexpr int32_t kPoolBlocks = 96;
constexpr int32_t kTokens = 30;

struct Case {
  TinyModelSpec spec;
  DType kv_dtype;
};

void PrintTo(const Case& c, std::ostream* os) {
  testing::PrintTo(c.spec, os);
  *os << " kv " << dtype_name(c.kv_dtype);
}

class ForwardInvarianceTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    const std::string path = testing::write_tiny_model(GetParam().spec, "invariance");
    auto loaded = Model::load(path);
    ASSERT_TRUE(loaded.ok()) << loaded.error().message();
    std::remove(path.c_str());
    model_ = std::move(*loaded);
    std::mt19937 rng(static_cast<uint32_t>(GetParam().spec.seed) + 11);
    std::uniform_int_distribution<TokenId> token(0, model_->n_vocab() - 1);
    for (auto& stream : streams_) {
      for (int32_t i = 0; i < kTokens; ++i) stream.push_back(token(rng));
    }
  }

  KvLayout layout() const { return model_->kv_layout(kBlockSize, GetParam().kv_dtype); }

  // Logits of every token of stream s, run one token per step, alone, on one thread.
  std::vector<float> one_token_at_a_time(size_t s) {
    ThreadPool pool(1);
    KvStorage kv(layout(), kPoolBlocks);
    std::vector<BlockId> table(kTokens / kBlockSize + 1);
    std::iota(table.begin(), table.end(), 0);
    std::vector<float> logits;
    ForwardOutput out;
    for (int32_t t = 0; t < kTokens; ++t) {
      Batch batch;
      batch.sequences.push_back({{streams_[s][static_cast<size_t>(t)]}, {{t, 1}}, table, LogitsFor::kLast, {}});
      EXPECT_TRUE(model_->forward(batch, kv, pool, out).ok());
      logits.insert(logits.end(), out.row(0), out.row(0) + out.n_vocab);
    }
    return logits;
  }

  std::unique_ptr<Model> model_;
  std::array<std::vector<TokenId>, 3> streams_;
};

TEST_P(ForwardInvarianceTest, LogitsDoNotDependOnTheBatch) {
  std::array<std::vector<float>, 3> expected;
  for (size_t s = 0; s < 3; ++s) expected[s] = one_token_at_a_time(s);

  // Three sequences in shuffled pool blocks, advancing by different amounts per step (0: sits
  // out): chunks, single decode steps, and long chunks mixed with other sequences' decodes.
  ThreadPool pool(2);
  KvStorage kv(layout(), kPoolBlocks);
  std::vector<BlockId> blocks(kPoolBlocks);
  std::iota(blocks.begin(), blocks.end(), 0);
  std::shuffle(blocks.begin(), blocks.end(), std::mt19937(5));
  const int32_t per_sequence = kTokens / kBlockSize + 1;
  std::array<std::vector<BlockId>, 3> tables;
  for (size_t s = 0; s < 3; ++s) {
    tables[s].assign(blocks.begin() + static_cast<int64_t>(s) * per_sequence,
                     blocks.begin() + static_cast<int64_t>(s + 1) * per_sequence);
  }
  const std::vector<std::array<int32_t, 3>> plan = {{12, 9, 1}, {1, 20, 1}, {1, 1, 13}, {16, 0, 1}, {0, 0, 14}};
  std::array<int32_t, 3> done = {0, 0, 0};
  for (const auto& step : plan) {
    Batch batch;
    std::vector<size_t> members;
    for (size_t s = 0; s < 3; ++s) {
      const int32_t n = step[s];
      if (n == 0) continue;
      SequenceInput in;
      in.tokens.assign(streams_[s].begin() + done[s], streams_[s].begin() + done[s] + n);
      in.ranges = {{done[s], n}};
      in.block_table = tables[s];
      in.logits = LogitsFor::kAll;
      batch.sequences.push_back(std::move(in));
      members.push_back(s);
    }
    ForwardOutput out;
    ASSERT_TRUE(model_->forward(batch, kv, pool, out).ok());
    for (size_t m = 0; m < members.size(); ++m) {
      const size_t s = members[m];
      for (int32_t i = 0; i < step[s]; ++i) {
        const float* want = expected[s].data() + static_cast<size_t>(done[s] + i) * static_cast<size_t>(out.n_vocab);
        ASSERT_EQ(std::memcmp(out.row(m, i), want, static_cast<size_t>(out.n_vocab) * sizeof(float)), 0)
            << "sequence " << s << ", position " << done[s] + i;
      }
    }
    for (size_t s = 0; s < 3; ++s) done[s] += step[s];
  }
  ASSERT_EQ(done, (std::array<int32_t, 3>{kTokens, kTokens, kTokens}));
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

INSTANTIATE_TEST_SUITE_P(
    Architectures, ForwardInvarianceTest,
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

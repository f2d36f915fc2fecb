// Tensor parallelism over real stage links on loopback (parallel/tensor_parallel.h): ranks of
// tiny Llama and Gemma models (Gemma's one KV head on both ranks) give the whole model's logits
// within the tolerance of tests/model/tensor_shard_test.cpp, the same bits on every run; a split
// the heads cannot take is refused at setup, naming the rank; a pass whose rank is gone fails.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>

#include "parallel/stage_worker.h"
#include "parallel/tensor_parallel.h"
#include "support/lose_worker.h"
#include "support/tiny_model.h"

namespace mnemo::parallel {
namespace {

using mnemo::testing::TinyModelSpec;

constexpr int32_t kBlockSize = 4;
constexpr int32_t kBlocks = 32;

struct Rig {
  std::string path;
  std::unique_ptr<Model> whole, coordinator;
  std::vector<std::unique_ptr<StageWorker>> workers;
  Result<std::unique_ptr<TensorParallel>> tp = make_error("not connected");
};

Rig make_rig(const TinyModelSpec& spec, const std::string& name, int ranks, int spares = 0) {
  Rig rig;
  rig.path = mnemo::testing::write_tiny_model(spec, name);
  auto whole = Model::load(rig.path);
  EXPECT_TRUE(whole.ok());
  rig.whole = std::move(*whole);
  LoadOptions coordinator;
  coordinator.layer_end = 0;
  coordinator.layer_norms = true;
  auto head = Model::load(rig.path, coordinator);
  EXPECT_TRUE(head.ok());
  rig.coordinator = std::move(*head);
  TensorParallelOptions options;
  options.step_timeout_seconds = 5;
  options.setup_timeout_seconds = 10;
  for (int r = 0; r < ranks + spares; ++r) {
    StageWorkerOptions w;
    w.model_path = rig.path;
    w.threads = 1;
    auto worker = StageWorker::start(w);
    EXPECT_TRUE(worker.ok());
    (r < ranks ? options.workers : options.spares).push_back((*worker)->endpoint());
    rig.workers.push_back(std::move(*worker));
  }
  rig.tp = TensorParallel::connect(rig.path, *rig.coordinator, kBlockSize, DType::F32, kBlocks, options);
  if (rig.tp.ok()) rig.coordinator->set_layer_runner(rig.tp->get());
  return rig;
}

// The logits of a prefill and three decode steps of two sequences, through `model`; `between(i)`
// runs before step i.
std::vector<float> run(Model& model, int32_t n_vocab, const std::function<void(size_t)>& between = nullptr) {
  ThreadPool pool(1);
  KvStorage kv(model.kv_layout(kBlockSize, DType::F32), kBlocks);
  std::mt19937 rng(3);
  std::vector<std::vector<TokenId>> prompts(2, std::vector<TokenId>(16));
  for (auto& p : prompts) {
    for (TokenId& t : p) t = static_cast<TokenId>(rng() % static_cast<uint32_t>(n_vocab));
  }
  std::vector<float> logits;
  const std::vector<std::pair<int32_t, int32_t>> steps = {{0, 12}, {12, 1}, {13, 1}, {14, 2}};
  for (size_t i = 0; i < steps.size(); ++i) {
    const auto [start, length] = steps[i];
    if (between) between(i);
    Batch batch;
    for (size_t s = 0; s < prompts.size(); ++s) {
      SequenceInput seq;
      seq.tokens.assign(prompts[s].begin() + start, prompts[s].begin() + start + length);
      seq.ranges = {{start, length}};
      for (BlockId b = 0; b < 4; ++b) seq.block_table.push_back(static_cast<BlockId>(s) * 4 + b);
      seq.logits = LogitsFor::kLast;
      batch.sequences.push_back(std::move(seq));
    }
    ForwardOutput out;
    const Status status = model.forward(batch, kv, pool, out);
    EXPECT_TRUE(status.ok()) << status.error().message();
    if (!status.ok()) return {};
    logits.insert(logits.end(), out.logits.begin(), out.logits.end());
  }
  return logits;
}

void expect_close(const std::vector<float>& want, const std::vector<float>& got) {
  ASSERT_EQ(want.size(), got.size());
  ASSERT_FALSE(want.empty());
  float max_diff = 0.0f, max_logit = 0.0f;
  for (size_t i = 0; i < want.size(); ++i) {
    max_diff = std::max(max_diff, std::abs(want[i] - got[i]));
    max_logit = std::max(max_logit, std::abs(want[i]));
  }
  EXPECT_LE(max_diff, 2e-2f * max_logit);
}

TEST(TensorParallel, TwoRanksOfLlamaAndGemmaComputeTheWholeModel) {
  TinyModelSpec llama;
  llama.n_ff = 1024;
  TinyModelSpec gemma;
  gemma.arch = Arch::kGemma3;
  gemma.n_kv_heads = 1;
  gemma.n_ff = 1024;
  gemma.seed = 6;
  for (const TinyModelSpec& spec : {llama, gemma}) {
    Rig rig = make_rig(spec, "tensor_parallel", 2);
    ASSERT_TRUE(rig.tp.ok()) << rig.tp.error().message();
    const std::vector<float> want = run(*rig.whole, spec.n_vocab);
    const std::vector<float> got = run(*rig.coordinator, spec.n_vocab);
    expect_close(want, got);
    const std::vector<float> again = run(*rig.coordinator, spec.n_vocab);
    ASSERT_EQ(got.size(), again.size());
    EXPECT_EQ(std::memcmp(got.data(), again.data(), got.size() * sizeof(float)), 0) << "the same bits on every run";
    // Two blocks a layer, four passes, each on both ranks.
    for (const auto& w : rig.workers) EXPECT_EQ(w->stats().microbatches_run, 2u * 4u * 2u * static_cast<uint64_t>(spec.n_layers));
    std::remove(rig.path.c_str());
  }
}

// A rank lost between two steps: the next pass fails, the spare takes its place with its KV
// heads restored from the replica on the next rank (and the replica it held from the rank
// before), and the pass runs again: every logit is the failure-free run's, bit for bit.
TEST(TensorParallel, ASpareTakesALostRanksPlaceWithItsKvRestored) {
  TinyModelSpec spec;  // SmolLM2's grouping: 9 query heads in 3 groups, ranks of 6 and 3
  spec.n_heads = 9;
  spec.n_kv_heads = 3;
  spec.n_ff = 1024;
  spec.seed = 8;
  for (const size_t lost : {size_t{0}, size_t{1}}) {
    Rig reference = make_rig(spec, "tensor_parallel_reference", 2);
    ASSERT_TRUE(reference.tp.ok());
    const std::vector<float> want = run(*reference.coordinator, spec.n_vocab);
    std::remove(reference.path.c_str());
    Rig rig = make_rig(spec, "tensor_parallel_loss", 2, 1);
    ASSERT_TRUE(rig.tp.ok()) << rig.tp.error().message();
    const std::vector<float> got = run(*rig.coordinator, spec.n_vocab, [&](size_t step) {
      if (step == 2) mnemo::testing::lose_worker(rig.workers[lost]);
    });
    ASSERT_EQ(want.size(), got.size());
    EXPECT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0) << "rank " << lost << " lost";
    EXPECT_EQ((*rig.tp)->replacements(), 1);
    EXPECT_EQ((*rig.tp)->workers()[lost], rig.workers.back()->endpoint());
    // The spare ran steps 2 and 3 only: two blocks a layer, two passes.
    EXPECT_EQ(rig.workers.back()->stats().microbatches_run, 2u * 2u * static_cast<uint64_t>(spec.n_layers));
    std::remove(rig.path.c_str());
  }
}

// One rank lost, then the other: the second spare's KV comes from the replica the first spare
// was given at its restore, so both losses leave the logits the failure-free run's.
TEST(TensorParallel, BothRanksLostInTurnAreReplaced) {
  TinyModelSpec spec;
  spec.n_heads = 9;
  spec.n_kv_heads = 3;
  spec.n_ff = 1024;
  spec.seed = 9;
  Rig reference = make_rig(spec, "tensor_parallel_reference2", 2);
  ASSERT_TRUE(reference.tp.ok());
  const std::vector<float> want = run(*reference.coordinator, spec.n_vocab);
  std::remove(reference.path.c_str());
  Rig rig = make_rig(spec, "tensor_parallel_two_losses", 2, 2);
  ASSERT_TRUE(rig.tp.ok()) << rig.tp.error().message();
  const std::vector<float> got = run(*rig.coordinator, spec.n_vocab, [&](size_t step) {
    if (step == 1) mnemo::testing::lose_worker(rig.workers[1]);
    if (step == 3) mnemo::testing::lose_worker(rig.workers[0]);
  });
  ASSERT_EQ(want.size(), got.size());
  EXPECT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0);
  EXPECT_EQ((*rig.tp)->replacements(), 2);
  std::remove(rig.path.c_str());
}

TEST(TensorParallel, ASplitTheHeadsCannotTakeIsRefusedAtSetup) {
  TinyModelSpec gemma;  // 4 query heads, one KV head: not over 3 ranks
  gemma.arch = Arch::kGemma3;
  gemma.n_kv_heads = 1;
  gemma.n_ff = 1536;
  Rig rig = make_rig(gemma, "tensor_parallel_refused", 3);
  ASSERT_FALSE(rig.tp.ok());
  EXPECT_NE(rig.tp.error().message().find("tensor rank 0 of 3"), std::string::npos) << rig.tp.error().message();
  EXPECT_NE(rig.tp.error().message().find("do not split over 3 ranks"), std::string::npos) << rig.tp.error().message();
  std::remove(rig.path.c_str());
}

TEST(TensorParallel, APassWhoseRankIsGoneFails) {
  TinyModelSpec llama;
  llama.n_ff = 1024;
  Rig rig = make_rig(llama, "tensor_parallel_gone", 2);
  ASSERT_TRUE(rig.tp.ok());
  mnemo::testing::lose_worker(rig.workers[1]);
  ThreadPool pool(1);
  KvStorage kv(rig.coordinator->kv_layout(kBlockSize, DType::F32), kBlocks);
  Batch batch;
  SequenceInput seq;
  seq.tokens = {1, 2, 3};
  seq.ranges = {{0, 3}};
  seq.block_table = {0};
  batch.sequences.push_back(seq);
  ForwardOutput out;
  const Status status = rig.coordinator->forward(batch, kv, pool, out);
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.error().message().find("tensor rank 1"), std::string::npos) << status.error().message();
  std::remove(rig.path.c_str());
}

}  // namespace
}  // namespace mnemo::parallel

// A pipeline over real stage links on loopback (UCX), in one process: two or three StageWorkers
// and a coordinator whose layers run on them give the whole model's logits bit for bit, with
// several microbatches in flight; a stage set up for another model refuses; a pass whose stage
// is gone fails within its timeout instead of hanging; and with a cluster secret, a stage
// refuses frames signed under another.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <random>

#include <fmt/format.h>

#include "parallel/pipeline.h"
#include "parallel/stage_worker.h"
#include "support/lose_worker.h"
#include "support/tiny_model.h"

namespace mnemo::parallel {
namespace {

using mnemo::testing::TinyModelSpec;

constexpr int32_t kBlockSize = 4;
constexpr int32_t kBlocks = 64;
const std::string kSecret(40, 's');

struct PipelineRig {
  std::string path;
  std::unique_ptr<Model> whole;
  std::unique_ptr<Model> coordinator;
  std::vector<std::unique_ptr<StageWorker>> workers;
  std::unique_ptr<Pipeline> pipeline;
};

PipelineRig make_rig(const TinyModelSpec& spec, const std::string& name, int n_stages, const std::string& secret,
                 int32_t microbatches, int n_spares = 0, int64_t device_pool_tokens = 0) {
  PipelineRig s;
  s.path = mnemo::testing::write_tiny_model(spec, name);
  auto whole = Model::load(s.path);
  EXPECT_TRUE(whole.ok());
  s.whole = std::move(*whole);
  LoadOptions head_only;
  head_only.layer_end = 0;
  auto coordinator = Model::load(s.path, head_only);
  EXPECT_TRUE(coordinator.ok());
  s.coordinator = std::move(*coordinator);
  PipelineOptions options;
  options.cluster_secret = secret;
  options.microbatches = microbatches;
  options.step_timeout_seconds = 5;
  for (int i = 0; i < n_stages + n_spares; ++i) {
    StageWorkerOptions w;
    w.model_path = s.path;
    w.threads = 1;
    w.cluster_secret = secret;
    w.device_pool_tokens = device_pool_tokens;
    auto worker = StageWorker::start(w);
    EXPECT_TRUE(worker.ok()) << worker.error().message();
    (i < n_stages ? options.stages : options.spares).push_back((*worker)->endpoint());
    s.workers.push_back(std::move(*worker));
  }
  auto pipeline = Pipeline::connect(s.path, *s.coordinator, kBlockSize, DType::F16, kBlocks, options);
  EXPECT_TRUE(pipeline.ok()) << pipeline.error().message();
  if (pipeline.ok()) {
    s.pipeline = std::move(*pipeline);
    s.coordinator->set_layer_runner(s.pipeline.get());
  }
  return s;
}

Batch step_batch(const std::vector<std::vector<TokenId>>& prompts, int32_t start, int32_t length) {
  Batch batch;
  for (size_t i = 0; i < prompts.size(); ++i) {
    SequenceInput seq;
    seq.tokens.assign(prompts[i].begin() + start, prompts[i].begin() + start + length);
    seq.ranges = {{start, length}};
    for (int32_t b = 0; b < 8; ++b) seq.block_table.push_back(static_cast<BlockId>(i * 8 + static_cast<size_t>(b)));
    seq.logits = LogitsFor::kLast;
    batch.sequences.push_back(std::move(seq));
  }
  return batch;
}

// Runs the steps on the whole model and through the pipeline, comparing the logits bit for bit;
// `between(i)` runs before step i.
void expect_pipeline_matches(PipelineRig& s, int32_t n_vocab, const std::function<void(size_t)>& between = nullptr) {
  ThreadPool pool(1);
  KvStorage whole_kv(s.whole->kv_layout(kBlockSize), kBlocks);
  KvStorage coordinator_kv(s.coordinator->kv_layout(kBlockSize), kBlocks);
  std::mt19937 rng(5);
  std::vector<std::vector<TokenId>> prompts(5, std::vector<TokenId>(20));
  for (auto& p : prompts) {
    for (TokenId& t : p) t = static_cast<TokenId>(rng() % static_cast<uint32_t>(n_vocab));
  }
  // A prefill of 12 tokens each, then decode steps.
  const std::vector<std::pair<int32_t, int32_t>> steps = {{0, 12}, {12, 1}, {13, 1}, {14, 3}, {17, 1}};
  for (size_t i = 0; i < steps.size(); ++i) {
    const auto [start, length] = steps[i];
    if (between) between(i);
    const Batch batch = step_batch(prompts, start, length);
    ForwardOutput expected, got;
    ASSERT_TRUE(s.whole->forward(batch, whole_kv, pool, expected).ok());
    const Status status = s.coordinator->forward(batch, coordinator_kv, pool, got);
    ASSERT_TRUE(status.ok()) << status.error().message();
    ASSERT_EQ(expected.logits.size(), got.logits.size());
    EXPECT_EQ(std::memcmp(expected.logits.data(), got.logits.data(), got.logits.size() * sizeof(float)), 0)
        << "step at " << start;
  }
}

TEST(Pipeline, TwoStagesOverTheLinkComputeTheWholeModelsLogits) {
  TinyModelSpec spec;
  spec.n_layers = 4;
  PipelineRig s = make_rig(spec, "pipeline2", 2, "", 0);
  ASSERT_TRUE(s.pipeline);
  ASSERT_EQ(s.pipeline->stage_setups().size(), 2u);
  EXPECT_EQ(s.pipeline->stage_setups()[1].layer_begin, 2);
  expect_pipeline_matches(s, spec.n_vocab);
  // Two microbatches a pass (one per stage), five passes, through both stages.
  for (const auto& w : s.workers) EXPECT_EQ(w->stats().microbatches_run, 10u);
  std::remove(s.path.c_str());
}

TEST(Pipeline, ThreeSignedStagesOfGemmaWithFourMicrobatchesInFlight) {
  TinyModelSpec spec;
  spec.arch = Arch::kGemma3;
  spec.n_layers = 5;
  spec.seed = 9;
  PipelineRig s = make_rig(spec, "pipeline3", 3, kSecret, 4);
  ASSERT_TRUE(s.pipeline);
  expect_pipeline_matches(s, spec.n_vocab);
  for (const auto& w : s.workers) EXPECT_EQ(w->stats().microbatches_run, 20u);
  std::remove(s.path.c_str());
}

// Microbatch swapping (SPEC D6): each stage's pool holds 10 blocks, one microbatch's (the five
// sequences reach five blocks each by the last step; four microbatches a pass, the largest of two
// sequences), against 64 blocks of KV in its host pool: the logits are the whole model's bit for
// bit, every microbatch's blocks came in and the ones it wrote went out.
TEST(Pipeline, StagesWhosePoolHoldsOneMicrobatchSwapEachInAndOut) {
  TinyModelSpec spec;
  spec.n_layers = 4;
  PipelineRig s = make_rig(spec, "pipeline_swap", 2, "", 4, 0, 10 * kBlockSize);
  ASSERT_TRUE(s.pipeline);
  expect_pipeline_matches(s, spec.n_vocab);
  for (const auto& w : s.workers) {
    const StageWorker::Stats stats = w->stats();
    EXPECT_EQ(stats.microbatches_run, 20u);
    EXPECT_EQ(stats.swap.microbatches, 20u);
    EXPECT_GT(stats.swap.blocks_in, stats.swap.blocks_out);
    EXPECT_GE(stats.swap.blocks_out, 20u);  // at least a block a microbatch
  }
  // A microbatch beyond the pool fails its pass with the reason.
  ThreadPool pool(1);
  KvStorage kv(s.coordinator->kv_layout(kBlockSize), kBlocks);
  std::vector<std::vector<TokenId>> long_prompt(1, std::vector<TokenId>(48, 2));
  Batch batch = step_batch(long_prompt, 0, 30);  // 8 blocks of the table
  batch.sequences[0].block_table.clear();
  for (BlockId b = 20; b < 32; ++b) batch.sequences[0].block_table.push_back(b);
  batch.sequences[0].tokens.assign(44, 2);
  batch.sequences[0].ranges = {{0, 44}};  // 11 blocks
  ForwardOutput out;
  const Status status = s.coordinator->forward(batch, kv, pool, out);
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.error().message().find("a microbatch of 11 blocks, the stage's pool holds 10"), std::string::npos)
      << status.error().message();
  std::remove(s.path.c_str());
}

struct LossCase {
  int stages;
  int lost;
};

class PipelineLossTest : public ::testing::TestWithParam<LossCase> {};

// A stage lost between two steps: the next pass fails, the coordinator finds the stage gone,
// sets the spare up, restores its KV from the replica on the next stage (and the replica it
// held from the stage before), and runs the pass again; every logit still equals the whole
// model's, which it could not if any KV were missing, and the spare ran only the passes after.
TEST_P(PipelineLossTest, ASpareTakesALostStagesPlaceWithItsKvRestored) {
  const LossCase c = GetParam();
  TinyModelSpec spec;
  spec.n_layers = 6;
  spec.seed = 4;
  PipelineRig s = make_rig(spec, "pipeline_loss", c.stages, kSecret, 0, 1);
  ASSERT_TRUE(s.pipeline);
  const size_t lost = static_cast<size_t>(c.lost);
  expect_pipeline_matches(s, spec.n_vocab, [&](size_t step) {
    if (step == 3) mnemo::testing::lose_worker(s.workers[lost]);
  });
  EXPECT_EQ(s.pipeline->replacements(), 1);
  const StageWorker& spare = *s.workers.back();
  EXPECT_EQ(s.pipeline->workers()[lost], spare.endpoint());
  // Steps 3 and 4 ran on the spare (one microbatch per stage each); nothing before was recomputed.
  EXPECT_EQ(spare.stats().microbatches_run, 2u * static_cast<uint64_t>(c.stages));
  EXPECT_GT(spare.stats().tokens_replicated, 0u);
  std::remove(s.path.c_str());
}

INSTANTIATE_TEST_SUITE_P(Losses, PipelineLossTest,
                         ::testing::Values(LossCase{2, 0}, LossCase{2, 1}, LossCase{3, 1}, LossCase{3, 2}),
                         [](const auto& param_info) { return fmt::format("of{}_stage{}", param_info.param.stages, param_info.param.lost); });

TEST(Pipeline, WithoutASpareALostStageFailsThePass) {
  TinyModelSpec spec;
  spec.n_layers = 4;
  PipelineRig s = make_rig(spec, "pipeline_nospare", 2, "", 0);
  ASSERT_TRUE(s.pipeline);
  mnemo::testing::lose_worker(s.workers[0]);
  ThreadPool pool(1);
  KvStorage kv(s.coordinator->kv_layout(kBlockSize), kBlocks);
  ForwardOutput out;
  const Status status = s.coordinator->forward(step_batch({std::vector<TokenId>(8, 3)}, 0, 8), kv, pool, out);
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.error().message().find("no spare took its place; 0 spares"), std::string::npos) << status.error().message();
  std::remove(s.path.c_str());
}

TEST(Pipeline, AStageRefusesAnotherModelAndFramesSignedUnderAnotherSecret) {
  TinyModelSpec spec;
  const std::string path = mnemo::testing::write_tiny_model(spec, "pipeline_mine");
  spec.seed = 2;
  const std::string other = mnemo::testing::write_tiny_model(spec, "pipeline_other");
  StageWorkerOptions w;
  w.model_path = path;
  w.threads = 1;
  w.cluster_secret = kSecret;
  auto worker = StageWorker::start(w);
  ASSERT_TRUE(worker.ok());
  auto model = Model::load(other);
  ASSERT_TRUE(model.ok());
  PipelineOptions options;
  options.stages = {(*worker)->endpoint()};
  options.cluster_secret = kSecret;
  options.setup_timeout_seconds = 5;
  auto refused = Pipeline::connect(other, **model, kBlockSize, DType::F16, kBlocks, options);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message().find("another model"), std::string::npos) << refused.error().message();
  options.cluster_secret = std::string(40, 'x');
  auto forged = Pipeline::connect(path, **model, kBlockSize, DType::F16, kBlocks, options);
  ASSERT_FALSE(forged.ok());
  EXPECT_EQ((*worker)->stats().setups, 0u);
  std::remove(path.c_str());
  std::remove(other.c_str());
}

TEST(Pipeline, APassWhoseStageIsGoneFailsInsteadOfHanging) {
  TinyModelSpec spec;
  spec.n_layers = 4;
  PipelineRig s = make_rig(spec, "pipeline_gone", 2, "", 0);
  ASSERT_TRUE(s.pipeline);
  mnemo::testing::lose_worker(s.workers[1]);  // the last stage goes away: the first cannot send on
  ThreadPool pool(1);
  KvStorage kv(s.coordinator->kv_layout(kBlockSize), kBlocks);
  const Batch batch = step_batch({std::vector<TokenId>(8, 3), std::vector<TokenId>(8, 4)}, 0, 8);
  ForwardOutput out;
  const auto started = std::chrono::steady_clock::now();
  const Status status = s.coordinator->forward(batch, kv, pool, out);
  ASSERT_FALSE(status.ok());
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(40));
  EXPECT_NE(status.error().message().find("pipeline pass"), std::string::npos) << status.error().message();
  std::remove(s.path.c_str());
}

}  // namespace
}  // namespace mnemo::parallel

// A model split into pipeline stages (LoadOptions' layer range, Model::run_layers) computes the
// same bits as the whole model: the coordinator embeds and projects, the stages run their layers
// over their own KV pools (which hold only their layers), and the logits of every step equal a
// single model's exactly, in batches of two sequences whose prefill and decode interleave.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <random>

#include "model/model.h"
#include "support/tiny_model.h"

namespace mnemo {
namespace {

using testing::TinyModelSpec;

constexpr int32_t kBlockSize = 4;
constexpr int32_t kPoolBlocks = 64;

// Runs the layers of each stage in turn, in this process.
class InProcessStages : public LayerRunner {
 public:
  struct Stage {
    std::unique_ptr<Model> model;
    std::unique_ptr<KvStorage> kv;
  };
  InProcessStages(std::vector<Stage> stages, ThreadPool& pool) : stages_(std::move(stages)), pool_(pool) {}
  Status run_layers(const Batch& batch, std::span<float> x) override {
    for (Stage& s : stages_) MNEMO_RETURN_IF_ERROR(s.model->run_layers(batch, x, *s.kv, pool_));
    return ok_status();
  }
  std::vector<Stage>& stages() { return stages_; }

 private:
  std::vector<Stage> stages_;
  ThreadPool& pool_;
};

std::unique_ptr<Model> load(const std::string& path, int32_t begin, int32_t end, bool head) {
  LoadOptions options;
  options.layer_begin = begin;
  options.layer_end = end;
  options.head = head;
  auto model = Model::load(path, options);
  EXPECT_TRUE(model.ok()) << model.error().message();
  return model.ok() ? std::move(*model) : nullptr;
}

struct Case {
  TinyModelSpec spec;
  std::vector<int32_t> cuts;  // stage boundaries inside [0, n_layers]
  DType kv_dtype;
};

void PrintTo(const Case& c, std::ostream* os) {
  testing::PrintTo(c.spec, os);
  *os << " stages " << c.cuts.size() + 1 << " kv " << dtype_name(c.kv_dtype);
}

class StageForwardTest : public ::testing::TestWithParam<Case> {
 protected:
  ThreadPool pool_{2};
};

TEST_P(StageForwardTest, StagesComputeTheWholeModelsBits) {
  const Case& c = GetParam();
  const std::string path = testing::write_tiny_model(c.spec, "stages");
  std::unique_ptr<Model> whole = load(path, 0, -1, true);
  std::unique_ptr<Model> coordinator = load(path, 0, 0, true);
  ASSERT_TRUE(whole && coordinator);
  std::vector<InProcessStages::Stage> stages;
  int32_t begin = 0;
  std::vector<int32_t> ends = c.cuts;
  ends.push_back(c.spec.n_layers);
  for (int32_t end : ends) {
    InProcessStages::Stage s;
    s.model = load(path, begin, end, false);
    ASSERT_TRUE(s.model);
    EXPECT_EQ(s.model->stage_kv_layout(kBlockSize, c.kv_dtype).n_layers, end - begin);
    s.kv = std::make_unique<KvStorage>(s.model->stage_kv_layout(kBlockSize, c.kv_dtype), kPoolBlocks);
    stages.push_back(std::move(s));
    begin = end;
  }
  std::remove(path.c_str());
  InProcessStages runner(std::move(stages), pool_);
  coordinator->set_layer_runner(&runner);

  KvStorage whole_kv(whole->kv_layout(kBlockSize, c.kv_dtype), kPoolBlocks);
  // The coordinator's pool is never written: its layers' KV lives on the stages.
  KvStorage coordinator_kv(coordinator->kv_layout(kBlockSize, c.kv_dtype), kPoolBlocks);
  std::mt19937 rng(static_cast<uint32_t>(c.spec.seed));
  std::uniform_int_distribution<TokenId> token(0, c.spec.n_vocab - 1);
  std::vector<TokenId> a(30), b(21);
  for (TokenId& t : a) t = token(rng);
  for (TokenId& t : b) t = token(rng);
  // (a's range, b's range) per step: prefill chunks, then decode steps beside the other's prefill.
  const std::vector<std::pair<QueryRange, QueryRange>> steps = {
      {{0, 9}, {0, 1}}, {{9, 12}, {1, 15}}, {{21, 1}, {16, 3}}, {{22, 5}, {19, 1}}, {{27, 1}, {20, 1}}, {{28, 2}, {0, 0}}};
  const std::vector<BlockId> table_a = {3, 17, 9, 40, 22, 5, 11, 30};
  const std::vector<BlockId> table_b = {60, 2, 45, 13, 28, 7};
  for (size_t step = 0; step < steps.size(); ++step) {
    Batch batch;
    const auto add = [&](const std::vector<TokenId>& tokens, QueryRange r, const std::vector<BlockId>& table, LogitsFor logits) {
      if (r.length == 0) return;
      SequenceInput s;
      s.tokens.assign(tokens.begin() + r.start, tokens.begin() + r.end());
      s.ranges = {r};
      s.block_table = table;
      s.logits = logits;
      batch.sequences.push_back(std::move(s));
    };
    add(a, steps[step].first, table_a, LogitsFor::kAll);
    add(b, steps[step].second, table_b, LogitsFor::kLast);
    ForwardOutput expected, got;
    ASSERT_TRUE(whole->forward(batch, whole_kv, pool_, expected).ok());
    const Status status = coordinator->forward(batch, coordinator_kv, pool_, got);
    ASSERT_TRUE(status.ok()) << status.error().message();
    ASSERT_EQ(expected.logits.size(), got.logits.size());
    EXPECT_EQ(std::memcmp(expected.logits.data(), got.logits.data(), expected.logits.size() * sizeof(float)), 0)
        << "step " << step;
  }
  // The stages' pools hold the whole model's KV, layer for layer.
  begin = 0;
  const KvLayout whole_layout = whole_kv.layout();
  for (InProcessStages::Stage& s : runner.stages()) {
    const int32_t n = s.model->layer_end() - s.model->layer_begin();
    const size_t slice = whole_layout.layer_elems() * whole_layout.element_bytes() * static_cast<size_t>(n);
    for (BlockId id : table_a) {
      const uint8_t* want = whole_kv.block(id) + whole_layout.layer_elems() * whole_layout.element_bytes() * static_cast<size_t>(begin);
      EXPECT_EQ(std::memcmp(want, s.kv->block(id), slice), 0) << "block " << id << " of layers from " << begin;
    }
    begin += n;
  }
}

std::vector<Case> cases() {
  TinyModelSpec llama;
  llama.n_layers = 4;
  TinyModelSpec gemma;
  gemma.arch = Arch::kGemma3;
  gemma.n_layers = 6;
  gemma.seed = 3;
  return {{llama, {2}, DType::F16}, {llama, {1, 3}, DType::F32}, {gemma, {3}, DType::F16}, {gemma, {1, 2, 5}, DType::F16}};
}

INSTANTIATE_TEST_SUITE_P(Stages, StageForwardTest, ::testing::ValuesIn(cases()));

TEST(StageModel, AStageRefusesAWholePassAndRangesOutsideTheModel) {
  TinyModelSpec spec;
  spec.n_layers = 3;
  const std::string path = testing::write_tiny_model(spec, "stage_refusals");
  std::unique_ptr<Model> stage = load(path, 1, 3, false);
  ASSERT_TRUE(stage);
  KvStorage kv(stage->kv_layout(kBlockSize), kPoolBlocks);
  Batch batch;
  SequenceInput seq;
  seq.tokens = {1, 2};
  seq.ranges = {{0, 2}};
  seq.block_table = {0};
  batch.sequences.push_back(seq);
  ThreadPool pool(1);
  ForwardOutput out;
  const Status whole = stage->forward(batch, kv, pool, out);
  ASSERT_FALSE(whole.ok());
  EXPECT_NE(whole.error().message().find("layers [1, 3)"), std::string::npos) << whole.error().message();
  // Its pool must hold its own layers only.
  std::vector<float> x(2 * static_cast<size_t>(spec.n_embd));
  EXPECT_FALSE(stage->run_layers(batch, x, kv, pool).ok());
  KvStorage stage_kv(stage->stage_kv_layout(kBlockSize), kPoolBlocks);
  EXPECT_TRUE(stage->run_layers(batch, x, stage_kv, pool).ok());
  std::vector<float> short_x(x.size() - 1);
  EXPECT_FALSE(stage->run_layers(batch, short_x, stage_kv, pool).ok());
  LoadOptions beyond;
  beyond.layer_begin = 2;
  beyond.layer_end = 4;
  EXPECT_FALSE(Model::load(path, beyond).ok());
  std::remove(path.c_str());
}

}  // namespace
}  // namespace mnemo

// The real Gemma 3 270M (Q4_K_M) against llama.cpp on the same file. The reference outputs are
// fixtures made by llama.cpp itself (scripts/gen_llama_fixtures.py, llama-cpp-python 0.3.36,
// F32 KV cache, flash attention off, 2 threads); prompts are fed as llama.cpp tokenised them, so
// this test checks the model, not the tokenizer (tests/tokenizer/ checks that).
//
// Strict agreement is required with an F32 pool, where both engines compute attention in F32 and
// results do not depend on batching. With the default F16 pool, small roundings move this
// model's logits by tenths (llama.cpp's own F16 runs disagree with its F32 runs, and with each
// other across batch sizes, at ~5% of top-1 positions), so there the bar is looser and the
// figures are printed.
//
// Needs the default model: fails (never skips) when it is missing.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/generator.h"
#include "model/model.h"
#include "util/paths.h"

namespace mnemo {
namespace {

nlohmann::json load_fixture(const std::string& name) {
  std::ifstream in(std::string(MNEMO_SOURCE_DIR) + "/tests/fixtures/" + name);
  EXPECT_TRUE(in.good()) << "missing fixture " << name;
  return nlohmann::json::parse(in);
}

class Gemma3FidelityTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto model = Model::load(default_model_path());
    ASSERT_TRUE(model.ok()) << model.error().message() << " (run scripts/setup.sh to fetch the default model)";
    model_ = std::move(*model).release();
  }
  static void TearDownTestSuite() {
    delete model_;
    model_ = nullptr;
  }
  void SetUp() override { ASSERT_NE(model_, nullptr); }

  static Model* model_;
  ThreadPool pool_{2};
};
Model* Gemma3FidelityTest::model_ = nullptr;

// Greedy continuations: every case identical for at least `required` tokens.
void check_greedy(Model& model, ThreadPool& pool, DType kv_dtype, size_t required, size_t required_cases) {
  const nlohmann::json fixture = load_fixture("gemma3_greedy.json");
  ASSERT_GE(fixture["cases"].size(), 8u);
  Generator generator(model, pool, 1024, kv_dtype);
  size_t passing = 0;
  for (const auto& c : fixture["cases"]) {
    const std::vector<TokenId> prompt = c["prompt_tokens"].get<std::vector<TokenId>>();
    const std::vector<TokenId> expected = c["generated"].get<std::vector<TokenId>>();
    GenerateOptions options;
    options.max_tokens = static_cast<int32_t>(expected.size());
    options.sampling.temperature = 0.0f;
    auto generated = generator.generate(prompt, options, nullptr, nullptr);
    ASSERT_TRUE(generated.ok()) << generated.error().message();
    size_t same = 0;
    while (same < expected.size() && same < generated->size() && (*generated)[same] == expected[same]) ++same;
    std::string title = c["prompt"].get<std::string>();
    std::replace(title.begin(), title.end(), '\n', ' ');
    std::printf("greedy kv %s: %-46.46s identical for %zu/%zu tokens\n", std::string(dtype_name(kv_dtype)).c_str(),
                title.c_str(), same, expected.size());
    passing += same >= required ? 1 : 0;
  }
  EXPECT_GE(passing, required_cases) << "cases identical for " << required << " tokens";
}

// Teacher forcing over 512 tokens: the share of positions whose top-1 token is llama.cpp's.
double teacher_forced_agreement(Model& model, ThreadPool& pool, DType kv_dtype) {
  const nlohmann::json fixture = load_fixture("gemma3_teacher_forced.json");
  const std::vector<TokenId> tokens = fixture["tokens"].get<std::vector<TokenId>>();
  const std::vector<TokenId> top1 = fixture["top1"].get<std::vector<TokenId>>();
  EXPECT_EQ(tokens.size(), 512u);
  KvStorage kv(model.kv_layout(16, kv_dtype), 512 / 16);
  SequenceInput seq;
  seq.tokens = tokens;
  seq.ranges = {{0, static_cast<int32_t>(tokens.size())}};
  for (BlockId b = 0; b < 32; ++b) seq.block_table.push_back(31 - b);  // reversed: non-contiguous
  seq.logits = LogitsFor::kAll;
  Batch batch;
  batch.sequences.push_back(seq);
  ForwardOutput out;
  const Status status = model.forward(batch, kv, pool, out);
  EXPECT_TRUE(status.ok());
  if (!status.ok()) return 0.0;
  size_t agree = 0;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const float* row = out.row(0, static_cast<int32_t>(i));
    const TokenId best = static_cast<TokenId>(std::max_element(row, row + out.n_vocab) - row);
    agree += best == top1[i] ? 1 : 0;
  }
  const double rate = static_cast<double>(agree) / static_cast<double>(tokens.size());
  std::printf("teacher-forced top-1 agreement, kv %s: %zu/%zu = %.2f%%\n", std::string(dtype_name(kv_dtype)).c_str(),
              agree, tokens.size(), 100.0 * rate);
  return rate;
}

TEST_F(Gemma3FidelityTest, GreedyContinuationsMatchLlamaCppWithF32Pool) {
  // Every case identical for at least 32 tokens (48 are compared and reported).
  check_greedy(*model_, pool_, DType::F32, 32, load_fixture("gemma3_greedy.json")["cases"].size());
}

TEST_F(Gemma3FidelityTest, GreedyContinuationsStayCloseWithF16Pool) {
  // Most cases still agree for a good stretch; a wrong kernel or mask diverges at once everywhere.
  check_greedy(*model_, pool_, DType::F16, 8, 6);
}

TEST_F(Gemma3FidelityTest, TeacherForcedTopOneAgreesWithLlamaCppWithF32Pool) {
  EXPECT_GE(teacher_forced_agreement(*model_, pool_, DType::F32), 0.99);
}

TEST_F(Gemma3FidelityTest, TeacherForcedTopOneCloseWithF16Pool) {
  EXPECT_GE(teacher_forced_agreement(*model_, pool_, DType::F16), 0.92);
}

}  // namespace
}  // namespace mnemo

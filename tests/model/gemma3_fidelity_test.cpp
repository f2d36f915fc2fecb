// The real Gemma 3 270M (Q4_K_M) against llama.cpp on the same file. The reference outputs are
// fixtures made by llama.cpp itself (scripts/gen_llama_fixtures.py, llama-cpp-python 0.3.36,
// F32 KV cache, flash attention off, 2 threads); prompts are fed as llama.cpp tokenised them, so
// this test checks the model, not the tokenizer (tests/tokenizer/ checks that).
//
// What "the same output" can mean for this model: its residual stream carries activations in
// the tens of thousands and every matrix product rounds its input to 8 bits, so a last-bit
// difference anywhere (summation order, exp) occasionally flips a rounding and moves the logits
// by tenths. llama.cpp is not consistent with itself at that level: between its own
// configurations (flash attention on/off, F16/F32 cache, batch size 8/128/512) the mean
// |logit difference| is ~0.2 and top-1 tokens differ at 4-9% of positions, always where its
// best two logits are within ~0.3 of each other. So the checks are:
//   - logits: mean |difference| over llama.cpp's top-8 logits within that noise (<= 0.35);
//   - top-1: identical wherever llama.cpp's margin is decisive (>= 0.75, the noise band): >= 99%
//     of those positions, and >= 92% of all positions;
//   - greedy: each continuation identical for 32 tokens, or up to a step where llama.cpp itself
//     had a near-tie: the token we took is one of its top 4 and within 0.75 of its best logit.
// A wrong position, mask, norm or kernel moves logits by whole units and fails all of these.
//
// Needs the default model: fails (never skips) when it is missing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/generator.h"
#include "model/model.h"
#include "util/paths.h"

namespace mnemo {
namespace {

constexpr float kDecisiveMargin = 0.75f;
constexpr size_t kGreedyTokens = 32;

nlohmann::json load_fixture(const std::string& name) {
  std::ifstream in(std::string(MNEMO_SOURCE_DIR) + "/tests/fixtures/" + name);
  EXPECT_TRUE(in.good()) << "missing fixture " << name;
  return nlohmann::json::parse(in);
}

class Gemma3FidelityTest : public ::testing::TestWithParam<DType> {
 protected:
  static void SetUpTestSuite() {
    auto model = Model::load(reference_model_path());
    ASSERT_TRUE(model.ok()) << model.error().message() << " (run scripts/setup.sh to fetch the default model)";
    model_ = std::move(*model).release();
  }
  static void TearDownTestSuite() {
    delete model_;
    model_ = nullptr;
  }
  void SetUp() override { ASSERT_NE(model_, nullptr); }
  std::string kv_name() const { return std::string(dtype_name(GetParam())); }

  static Model* model_;
  ThreadPool pool_{2};
};
Model* Gemma3FidelityTest::model_ = nullptr;

TEST_P(Gemma3FidelityTest, GreedyContinuationsMatchLlamaCpp) {
  const nlohmann::json fixture = load_fixture("gemma3_greedy.json");
  ASSERT_GE(fixture["cases"].size(), 8u);
  Generator generator(*model_, pool_, 1024, GetParam());
  for (const auto& c : fixture["cases"]) {
    const std::vector<TokenId> prompt = c["prompt_tokens"].get<std::vector<TokenId>>();
    const std::vector<TokenId> expected = c["generated"].get<std::vector<TokenId>>();
    const auto top4 = c["top4"].get<std::vector<std::vector<TokenId>>>();
    const auto top4_logits = c["top4_logits"].get<std::vector<std::vector<float>>>();
    GenerateOptions options;
    options.max_tokens = static_cast<int32_t>(expected.size());
    options.sampling.temperature = 0.0f;
    auto generated = generator.generate(prompt, options, nullptr, nullptr);
    ASSERT_TRUE(generated.ok()) << generated.error().message();
    size_t same = 0;
    while (same < expected.size() && same < generated->size() && (*generated)[same] == expected[same]) ++same;
    std::string title = c["prompt"].get<std::string>();
    std::replace(title.begin(), title.end(), '\n', ' ');
    std::printf("greedy kv %s: %-46.46s identical for %zu/%zu tokens", kv_name().c_str(), title.c_str(), same,
                expected.size());
    if (same < expected.size()) {
      std::printf(" (llama.cpp's top two there differ by %.3f)",
                  static_cast<double>(top4_logits[same][0] - top4_logits[same][1]));
    }
    std::printf("\n");
    if (same >= kGreedyTokens) continue;
    ASSERT_LT(same, generated->size()) << "generation stopped early: " << title;
    const auto& candidates = top4[same];
    const auto it = std::find(candidates.begin(), candidates.end(), (*generated)[same]);
    ASSERT_NE(it, candidates.end()) << title << ": diverged at step " << same << " to a token outside llama.cpp's top 4";
    const float gap = top4_logits[same][0] - top4_logits[same][static_cast<size_t>(it - candidates.begin())];
    EXPECT_LT(gap, kDecisiveMargin) << title << ": diverged at step " << same << " where llama.cpp preferred its token by " << gap;
  }
}

TEST_P(Gemma3FidelityTest, TeacherForcedLogitsMatchLlamaCpp) {
  const nlohmann::json fixture = load_fixture("gemma3_teacher_forced.json");
  const std::vector<TokenId> tokens = fixture["tokens"].get<std::vector<TokenId>>();
  const std::vector<TokenId> top1 = fixture["top1"].get<std::vector<TokenId>>();
  const std::vector<float> margins = fixture["margins"].get<std::vector<float>>();
  const auto top8 = fixture["top8"].get<std::vector<std::vector<TokenId>>>();
  const auto top8_logits = fixture["top8_logits"].get<std::vector<std::vector<float>>>();
  ASSERT_EQ(tokens.size(), 512u);

  KvStorage kv(model_->kv_layout(16, GetParam()), 512 / 16);
  SequenceInput seq;
  seq.tokens = tokens;
  seq.ranges = {{0, static_cast<int32_t>(tokens.size())}};
  for (BlockId b = 0; b < 32; ++b) seq.block_table.push_back(31 - b);  // reversed: non-contiguous
  seq.logits = LogitsFor::kAll;
  Batch batch;
  batch.sequences.push_back(seq);
  ForwardOutput out;
  ASSERT_TRUE(model_->forward(batch, kv, pool_, out).ok());

  size_t agree = 0, decisive = 0, decisive_agree = 0;
  double diff_sum = 0.0;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const float* row = out.row(0, static_cast<int32_t>(i));
    const TokenId best = static_cast<TokenId>(std::max_element(row, row + out.n_vocab) - row);
    agree += best == top1[i] ? 1 : 0;
    if (margins[i] >= kDecisiveMargin) {
      ++decisive;
      decisive_agree += best == top1[i] ? 1 : 0;
    }
    for (size_t j = 0; j < top8[i].size(); ++j) diff_sum += std::abs(row[top8[i][j]] - top8_logits[i][j]);
  }
  const double rate = static_cast<double>(agree) / static_cast<double>(tokens.size());
  const double decisive_rate = static_cast<double>(decisive_agree) / static_cast<double>(decisive);
  const double mean_diff = diff_sum / (static_cast<double>(tokens.size()) * 8.0);
  std::printf("teacher-forced, kv %s: top-1 %zu/%zu = %.2f%%; decisive positions %zu/%zu = %.2f%%; "
              "mean |logit diff| over llama.cpp's top 8 = %.3f\n",
              kv_name().c_str(), agree, tokens.size(), 100.0 * rate, decisive_agree, decisive, 100.0 * decisive_rate,
              mean_diff);
  EXPECT_LE(mean_diff, 0.35);
  EXPECT_GE(decisive_rate, 0.99);
  EXPECT_GE(rate, 0.92);
}

INSTANTIATE_TEST_SUITE_P(KvTypes, Gemma3FidelityTest, ::testing::Values(DType::F32, DType::F16),
                         [](const ::testing::TestParamInfo<DType>& param_info) {
                           return std::string(dtype_name(param_info.param));
                         });

}  // namespace
}  // namespace mnemo

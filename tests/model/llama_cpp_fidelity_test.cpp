// The real models, Gemma 3 270M (Q4_K_M), SmolLM2-135M-Instruct (Q4_1) and
// Qwen2.5-Coder-0.5B-Instruct (Q4_K_M: Q4_K, Q5_0, Q6_K and Q8_0 tensors, architecture qwen2),
// against llama.cpp on the same files. The reference outputs are
// fixtures made by llama.cpp itself (scripts/gen_llama_fixtures.py, llama-cpp-python 0.3.36,
// F32 KV cache, flash attention off, 2 threads); prompts are fed as llama.cpp tokenised them, so
// this test checks the model, not the tokenizer (tests/tokenizer/ checks that).
//
// What "the same output" can mean for Gemma: its residual stream carries activations in
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
// SmolLM2 is held to the same bounds but for the greedy one (Case::greedy_margin), measured the
// same way: llama.cpp against itself (flash attention on/off, F16/F32 cache) on the
// teacher-forced text has top-1 95.7-96.3%, decisive 100%, mean |logit diff| 0.134-0.136, and
// its largest logit move is 0.93 (docs/model.md). Qwen2.5-Coder, measured the same way: llama.cpp
// against itself has top-1 97.9-98.0%, mean |logit diff| 0.060-0.062 and largest move 0.49-0.72
// (flash attention on with an F16 cache, and off with one), so Gemma's band of 0.75 holds.
//
// Needs the real models: fails (never skips) when one is missing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <memory>
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

struct Case {
  const char* family;  // the fixtures' prefix (scripts/gen_llama_fixtures.py)
  DType kv;
  // A greedy divergence passes where llama.cpp preferred its token by less than this: its own
  // noise band on the model (Gemma: 0.75, above; SmolLM2: 0.95, as its logits move by up to 0.93
  // between its own configurations, F16/F32 cache and flash attention on/off, on the
  // teacher-forced text).
  float greedy_margin;
};

// One model per family, loaded once for all its cases.
Model* model_of(const std::string& family) {
  static std::map<std::string, std::unique_ptr<Model>> loaded;
  auto& slot = loaded[family];
  if (!slot) {
    const std::string path = family == "gemma3"       ? reference_model_path()
                             : family == "qwen2coder" ? qwen_coder_model_path()
                                                      : chat_model_path();
    auto model = Model::load(path);
    EXPECT_TRUE(model.ok()) << (model.ok() ? "" : model.error().message()) << " (run scripts/setup.sh to fetch the models)";
    if (model.ok()) slot = std::move(*model);
  }
  return slot.get();
}

class LlamaCppFidelityTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    model_ = model_of(GetParam().family);
    ASSERT_NE(model_, nullptr);
  }
  std::string family() const { return GetParam().family; }
  std::string kv_name() const { return std::string(dtype_name(GetParam().kv)); }

  Model* model_ = nullptr;
  ThreadPool pool_{2};
};

TEST_P(LlamaCppFidelityTest, GreedyContinuationsMatchLlamaCpp) {
  const nlohmann::json fixture = load_fixture(family() + "_greedy.json");
  ASSERT_GE(fixture["cases"].size(), 8u);
  Generator generator(*model_, pool_, 1024, GetParam().kv);
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
    std::printf("%s greedy kv %s: %-46.46s identical for %zu/%zu tokens", family().c_str(), kv_name().c_str(), title.c_str(), same,
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
    EXPECT_LT(gap, GetParam().greedy_margin) << title << ": diverged at step " << same << " where llama.cpp preferred its token by " << gap;
  }
}

TEST_P(LlamaCppFidelityTest, TeacherForcedLogitsMatchLlamaCpp) {
  const nlohmann::json fixture = load_fixture(family() + "_teacher_forced.json");
  const std::vector<TokenId> tokens = fixture["tokens"].get<std::vector<TokenId>>();
  const std::vector<TokenId> top1 = fixture["top1"].get<std::vector<TokenId>>();
  const std::vector<float> margins = fixture["margins"].get<std::vector<float>>();
  const auto top8 = fixture["top8"].get<std::vector<std::vector<TokenId>>>();
  const auto top8_logits = fixture["top8_logits"].get<std::vector<std::vector<float>>>();
  ASSERT_EQ(tokens.size(), 512u);

  KvStorage kv(model_->kv_layout(16, GetParam().kv), 512 / 16);
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
  float max_gap_change = 0.0f;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const float* row = out.row(0, static_cast<int32_t>(i));
    const TokenId best = static_cast<TokenId>(std::max_element(row, row + out.n_vocab) - row);
    agree += best == top1[i] ? 1 : 0;
    if (margins[i] >= kDecisiveMargin) {
      ++decisive;
      decisive_agree += best == top1[i] ? 1 : 0;
    }
    for (size_t j = 0; j < top8[i].size(); ++j) {
      diff_sum += std::abs(row[top8[i][j]] - top8_logits[i][j]);
      // How far llama.cpp's preference of its best over this candidate moved.
      const float gap_change = (row[top8[i][0]] - row[top8[i][j]]) - (top8_logits[i][0] - top8_logits[i][j]);
      max_gap_change = std::max(max_gap_change, std::abs(gap_change));
    }
  }
  const double rate = static_cast<double>(agree) / static_cast<double>(tokens.size());
  const double decisive_rate = static_cast<double>(decisive_agree) / static_cast<double>(decisive);
  const double mean_diff = diff_sum / (static_cast<double>(tokens.size()) * 8.0);
  std::printf("%s teacher-forced, kv %s: top-1 %zu/%zu = %.2f%%; decisive positions %zu/%zu = %.2f%%; "
              "mean |logit diff| over llama.cpp's top 8 = %.3f; largest move of a top-8 gap = %.3f\n",
              family().c_str(), kv_name().c_str(), agree, tokens.size(), 100.0 * rate, decisive_agree, decisive, 100.0 * decisive_rate,
              mean_diff, static_cast<double>(max_gap_change));
  EXPECT_LE(mean_diff, 0.35);
  EXPECT_GE(decisive_rate, 0.99);
  EXPECT_GE(rate, 0.92);
}

INSTANTIATE_TEST_SUITE_P(ModelsAndKvTypes, LlamaCppFidelityTest,
                         ::testing::Values(Case{"gemma3", DType::F32, kDecisiveMargin}, Case{"gemma3", DType::F16, kDecisiveMargin},
                                           Case{"smollm2", DType::F32, 0.95f}, Case{"smollm2", DType::F16, 0.95f},
                                           Case{"qwen2coder", DType::F32, kDecisiveMargin},
                                           Case{"qwen2coder", DType::F16, kDecisiveMargin}),
                         [](const ::testing::TestParamInfo<Case>& param_info) {
                           return std::string(param_info.param.family) + "_" + std::string(dtype_name(param_info.param.kv));
                         });

}  // namespace
}  // namespace mnemo

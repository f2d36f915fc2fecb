// Speculative decoding in the engine, on a tiny synthetic model: a request's tokens and text
// with drafts verified are those without speculation: greedy (every row's argmax found by the
// model, or its logits sampled when logprobs are asked for) and seeded sampling (each row drawn
// at its own step), with stop strings, n > 1, chunked prefill, a pool tight enough to preempt,
// and at max_tokens. Drafts are made and kept (the metrics say so, or the test would pass with
// speculation never running), the request field opts out, and the pool's blocks all come back.
#include <gtest/gtest.h>

#include <random>

#include "engine/engine.h"
#include "engine/stream_collect.h"
#include "support/tiny_model.h"

namespace mnemo {
namespace {

using testing::TinyModelSpec;

class SpeculationTest : public ::testing::Test {
 public:
  static void SetUpTestSuite() {
    TinyModelSpec spec;
    spec.n_vocab = 300;
    spec.with_tokenizer = true;
    spec.context_length = 256;
    spec.seed = 3;
    testing::LoadedTinyModel loaded = testing::load_tiny_model(spec, "speculation");
    ASSERT_NE(loaded.model, nullptr);
    model_ = loaded.model.release();
    tokenizer_ = loaded.tokenizer.release();
  }
  static void TearDownTestSuite() {
    delete tokenizer_;
    delete model_;
  }

  struct Run {
    std::vector<testing::Collected> replies;
    std::vector<std::vector<std::vector<TokenId>>> choices;  // per request, per choice: its tokens
    MetricsSnapshot metrics;
  };
  static Run run(EngineConfig config, const std::vector<GenerationRequest>& requests) {
    Engine engine(*model_, *tokenizer_, config);
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (const GenerationRequest& r : requests) {
      auto s = engine.submit(r);
      EXPECT_TRUE(s.ok()) << s.error().message();
      if (s.ok()) streams.push_back(*s);
    }
    Run out;
    for (auto& s : streams) {
      // The choices' tokens interleave differently with speculation (a choice may emit several
      // in one step): compared choice by choice.
      out.choices.emplace_back();
      out.replies.push_back(testing::collect(*s, [&out](const TokenDelta& d) {
        auto& choices = out.choices.back();
        if (choices.size() <= static_cast<size_t>(d.choice)) choices.resize(static_cast<size_t>(d.choice) + 1);
        if (d.token >= 0) choices[static_cast<size_t>(d.choice)].push_back(d.token);
      }));
    }
    out.metrics = engine.metrics();
    return out;
  }
  static EngineConfig config(bool speculation) {
    EngineConfig c;
    c.threads = 2;
    c.block_size = 4;
    c.kv_blocks = 1024;
    c.host_swap_blocks = 0;
    c.max_batch_tokens = 64;
    c.speculation.enabled = speculation;
    c.speculation.learn_row_cost = false;
    return c;
  }
  static uint64_t drafted(const MetricsSnapshot& m) { return m.spec_draft_tokens[0] + m.spec_draft_tokens[1]; }
  static uint64_t kept(const MetricsSnapshot& m) { return m.spec_accepted_tokens[0] + m.spec_accepted_tokens[1]; }

  static Model* model_;
  static Tokenizer* tokenizer_;
};
Model* SpeculationTest::model_ = nullptr;
Tokenizer* SpeculationTest::tokenizer_ = nullptr;

// A prompt that repeats a phrase (drafts find it), and a request that reports every token.
GenerationRequest repetitive(uint32_t seed, int32_t max_tokens, float temperature, bool logprobs) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<TokenId> dist(3, 299);
  std::vector<TokenId> phrase;
  for (int i = 0; i < 6; ++i) phrase.push_back(dist(rng));
  GenerationRequest r;
  r.prompt.push_back(1);
  for (int rep = 0; rep < 4; ++rep) r.prompt.insert(r.prompt.end(), phrase.begin(), phrase.end());
  r.max_tokens = max_tokens;
  r.sampling.temperature = temperature;
  r.sampling.seed = seed;
  r.ignore_eos = true;
  r.report_every_token = true;
  r.top_logprobs = logprobs ? 2 : -1;
  return r;
}

std::vector<GenerationRequest> mixed(int count) {
  std::vector<GenerationRequest> out;
  for (int i = 0; i < count; ++i) {
    // Greedy without logprobs (rows' argmax in the product), greedy with them (rows sampled
    // from logits), seeded sampling hot and mild.
    const float temperature = i % 4 < 2 ? 0.0f : (i % 4 == 2 ? 0.7f : 1.2f);
    out.push_back(repetitive(static_cast<uint32_t>(40 + i), 30 + i % 7, temperature, i % 4 == 1));
  }
  return out;
}

void expect_same(const SpeculationTest::Run& with_run, const SpeculationTest::Run& without_run) {
  const auto& with = with_run.replies;
  const auto& without = without_run.replies;
  ASSERT_EQ(with.size(), without.size());
  for (size_t i = 0; i < with.size(); ++i) {
    EXPECT_EQ(with_run.choices[i], without_run.choices[i]) << "request " << i;
    if (with_run.choices[i].size() == 1) {
      EXPECT_EQ(with[i].text, without[i].text) << "request " << i;
    }
    EXPECT_EQ(with[i].reason, without[i].reason) << "request " << i;
    EXPECT_EQ(with[i].usage.completion_tokens, without[i].usage.completion_tokens) << "request " << i;
    EXPECT_TRUE(with[i].error.empty()) << with[i].error;
  }
}

TEST_F(SpeculationTest, OutputsAreThoseWithoutSpeculationGreedyAndSeeded) {
  const auto requests = mixed(12);
  const Run with = run(config(true), requests);
  const Run without = run(config(false), requests);
  expect_same(with, without);
  for (size_t i = 0; i < requests.size(); ++i) {
    EXPECT_EQ(static_cast<int32_t>(with.replies[i].tokens.size()), requests[i].max_tokens) << "request " << i;
  }
  EXPECT_GT(drafted(with.metrics), 0u);
  EXPECT_GT(kept(with.metrics), 0u);
  EXPECT_LE(kept(with.metrics), drafted(with.metrics));
  EXPECT_EQ(drafted(without.metrics), 0u);
  // Fewer passes per token: kept drafts are tokens no pass of their own produced.
  EXPECT_EQ(with.metrics.generation_tokens_total, without.metrics.generation_tokens_total);
  EXPECT_EQ(without.metrics.decode_passes_total, without.metrics.generation_tokens_total);
  EXPECT_EQ(with.metrics.decode_passes_total + kept(with.metrics), with.metrics.generation_tokens_total);
  // Every block is back in the pool (rejected drafts' blocks given back as they were refused).
  EXPECT_EQ(with.metrics.kv_blocks_used, 0);
}

TEST_F(SpeculationTest, GreedyAloneKeepsDraftsAndTakesFewerPasses) {
  // Alone, greedy, no logprobs: the batch-1 case speculation is for. A random model's greedy
  // output falls into stretches it repeated before, which the context then drafts.
  const Run with = run(config(true), {repetitive(7, 120, 0.0f, false)});
  const Run without = run(config(false), {repetitive(7, 120, 0.0f, false)});
  expect_same(with, without);
  EXPECT_GT(kept(with.metrics) * 4, drafted(with.metrics)) << "kept " << kept(with.metrics) << " of " << drafted(with.metrics);
  // At least 1.25 tokens per pass (1.29 measured on this model).
  EXPECT_LT(with.metrics.decode_passes_total * 5, with.metrics.generation_tokens_total * 4)
      << with.metrics.decode_passes_total << " passes for " << with.metrics.generation_tokens_total << " tokens";
  EXPECT_EQ(without.metrics.decode_passes_total, without.metrics.generation_tokens_total);
}

TEST_F(SpeculationTest, ARequestOptsOut) {
  auto requests = mixed(4);
  for (GenerationRequest& r : requests) r.speculation = false;
  const Run with = run(config(true), requests);
  EXPECT_EQ(drafted(with.metrics), 0u);
  expect_same(with, run(config(false), requests));
}

TEST_F(SpeculationTest, StopStringsParallelSamplesAndChunkedPrefill) {
  auto requests = mixed(8);
  for (size_t i = 0; i < requests.size(); ++i) {
    if (i % 2 == 0) requests[i].n = 3;
    // A stop string made of a token's text the greedy loop produces: cut inside a verified run.
    const std::vector<TokenId> token{requests[i].prompt[3]};
    const std::string text = tokenizer_->decode(token);
    if (i % 3 == 0 && !text.empty()) requests[i].stop = {text};
  }
  // Prompts of 25 tokens run in pieces of at most 20; drafts up to 40 rows a step.
  EngineConfig small = config(true);
  small.max_batch_tokens = 20;
  small.speculation.max_step_tokens = 40;
  const Run with = run(small, requests);
  const Run without = run(config(false), requests);
  expect_same(with, without);
  EXPECT_GT(kept(with.metrics), 0u);
}

TEST_F(SpeculationTest, TightPoolPreemptsWithoutChangingOutputs) {
  const auto requests = mixed(10);
  EngineConfig tight = config(true);
  tight.kv_blocks = 48;
  tight.decode_reserve = 0.0f;
  const Run with = run(tight, requests);
  EXPECT_GT(with.metrics.preemptions_total, 0u);
  EXPECT_GT(drafted(with.metrics), 0u);
  expect_same(with, run(config(false), requests));
  EXPECT_EQ(with.metrics.kv_blocks_used, 0);
}

TEST_F(SpeculationTest, StepRowCapBoundsDrafts) {
  // A cap of one row per step leaves no room for a draft beside a decode token.
  EngineConfig capped = config(true);
  capped.speculation.max_step_tokens = 1;
  const auto requests = mixed(4);
  const Run with = run(capped, requests);
  EXPECT_EQ(drafted(with.metrics), 0u);
  expect_same(with, run(config(false), requests));
}

}  // namespace
}  // namespace mnemo

// Embedding requests in the engine (GenerationRequest::pooling) on a tiny synthetic model: the
// pooled vector is the mean (or the last) of the final-normed hidden states the model gives for
// the prompt run in one piece, whether the engine runs it in chunks, batched with generation,
// or (last-token pooling) from a cached prefix; generation beside it is unchanged.
#include <gtest/gtest.h>

#include <cstdio>
#include <numeric>
#include <random>

#include "engine/engine.h"
#include "engine/stream_collect.h"
#include "support/tiny_model.h"

namespace mnemo {
namespace {

using Result = testing::Collected;

Result collect(RequestStream& stream) { return testing::collect(stream, std::chrono::milliseconds(30000)); }

class EmbeddingEngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    testing::TinyModelSpec spec;
    spec.n_vocab = 300;
    spec.with_tokenizer = true;
    spec.context_length = 256;
    const std::string path = testing::write_tiny_model(spec, "embedding_engine");
    auto model = Model::load(path);
    ASSERT_TRUE(model.ok()) << model.error().message();
    std::remove(path.c_str());
    model_ = std::move(*model).release();
    auto tokenizer = Tokenizer::from_gguf(model_->file());
    ASSERT_TRUE(tokenizer.ok());
    tokenizer_ = std::move(*tokenizer).release();
  }
  static void TearDownTestSuite() {
    delete tokenizer_;
    delete model_;
  }

  static std::vector<TokenId> prompt(uint32_t seed, int32_t n) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<TokenId> token(3, 299);
    std::vector<TokenId> p{1};
    while (static_cast<int32_t>(p.size()) < n) p.push_back(token(rng));
    return p;
  }
  static GenerationRequest embedding(std::vector<TokenId> tokens, Pooling pooling) {
    GenerationRequest r;
    r.prompt = std::move(tokens);
    r.pooling = pooling;
    return r;
  }
  static EngineConfig config(int32_t batch_tokens) {
    EngineConfig c;
    c.threads = 2;
    c.block_size = 4;
    c.kv_blocks = 512;
    c.host_swap_blocks = 0;
    c.max_batch_tokens = batch_tokens;
    return c;
  }
  // The prompt's final-normed hidden states from one pass over all of it.
  static std::vector<std::vector<float>> hidden_states(const std::vector<TokenId>& tokens) {
    ThreadPool pool(1);
    KvStorage kv(model_->kv_layout(4), 128);
    Batch batch;
    SequenceInput in;
    in.tokens = tokens;
    in.ranges = {{0, static_cast<int32_t>(tokens.size())}};
    in.block_table.resize(tokens.size() / 4 + 1);
    std::iota(in.block_table.begin(), in.block_table.end(), 0);
    in.logits = LogitsFor::kHidden;
    batch.sequences.push_back(in);
    ForwardOutput out;
    EXPECT_TRUE(model_->forward(batch, kv, pool, out).ok());
    std::vector<std::vector<float>> rows;
    for (size_t i = 0; i < tokens.size(); ++i) {
      const float* h = out.hidden_row(0, static_cast<int32_t>(i));
      rows.emplace_back(h, h + out.n_embd);
    }
    return rows;
  }
  static std::vector<float> mean_of(const std::vector<std::vector<float>>& rows) {
    std::vector<double> sum(rows[0].size(), 0.0);
    for (const auto& row : rows) {
      for (size_t d = 0; d < row.size(); ++d) sum[d] += row[d];
    }
    std::vector<float> mean;
    for (const double s : sum) mean.push_back(static_cast<float>(s * (1.0 / static_cast<double>(rows.size()))));
    return mean;
  }
  static void expect_near(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    for (size_t d = 0; d < got.size(); ++d) ASSERT_NEAR(got[d], want[d], 1e-5f * (1.0f + std::abs(want[d]))) << what << " at " << d;
  }

  static Model* model_;
  static Tokenizer* tokenizer_;
};
Model* EmbeddingEngineTest::model_ = nullptr;
Tokenizer* EmbeddingEngineTest::tokenizer_ = nullptr;

TEST_F(EmbeddingEngineTest, MeanAndLastPoolTheModelsHiddenStatesInChunksAndBatches) {
  const std::vector<TokenId> tokens = prompt(5, 45);
  const std::vector<std::vector<float>> rows = hidden_states(tokens);
  ASSERT_EQ(rows[0].size(), 64u);
  for (const int32_t batch_tokens : {256, 16}) {  // in one step, and in chunks of 16
    Engine engine(*model_, *tokenizer_, config(batch_tokens));
    GenerationRequest generation;
    generation.prompt = prompt(9, 30);
    generation.max_tokens = 12;
    generation.ignore_eos = true;
    generation.sampling.temperature = 0.0f;
    auto alongside = engine.submit(generation);
    auto mean = engine.submit(embedding(tokens, Pooling::kMean));
    auto last = engine.submit(embedding(tokens, Pooling::kLast));
    ASSERT_TRUE(mean.ok() && last.ok() && alongside.ok());
    const Result m = collect(**mean), l = collect(**last), g = collect(**alongside);
    const std::string what = "batch tokens " + std::to_string(batch_tokens);
    EXPECT_EQ(m.pooled_events, 1) << what;
    EXPECT_TRUE(m.tokens.empty()) << "nothing is generated";
    EXPECT_EQ(m.usage.prompt_tokens, 45);
    EXPECT_EQ(m.usage.completion_tokens, 0);
    expect_near(m.embedding, mean_of(rows), "mean, " + what);
    expect_near(l.embedding, rows.back(), "last, " + what);
    // The generation beside them is what it is alone.
    Engine alone(*model_, *tokenizer_, config(batch_tokens));
    auto solo = alone.submit(generation);
    ASSERT_TRUE(solo.ok());
    EXPECT_EQ(g.tokens, collect(**solo).tokens) << what;
  }
}

TEST_F(EmbeddingEngineTest, LastTokenPoolingReusesACachedPrefixAndTheMeanRunsEveryToken) {
  const std::vector<TokenId> tokens = prompt(6, 41);
  Engine engine(*model_, *tokenizer_, config(64));
  for (const Pooling pooling : {Pooling::kLast, Pooling::kMean}) {
    auto first = engine.submit(embedding(tokens, pooling));
    ASSERT_TRUE(first.ok());
    const Result a = collect(**first);
    auto second = engine.submit(embedding(tokens, pooling));
    ASSERT_TRUE(second.ok());
    const Result b = collect(**second);
    if (pooling == Pooling::kLast) {
      EXPECT_EQ(b.usage.cached_tokens, 40) << "the whole chunks before the last token";
    } else {
      EXPECT_EQ(b.usage.cached_tokens, 0) << "a mean needs every token's state";
    }
    expect_near(b.embedding, a.embedding, pooling == Pooling::kLast ? "last, cached" : "mean, again");
  }
  // An embedded prompt's KV serves a later generation.
  GenerationRequest generation;
  generation.prompt = tokens;
  generation.prompt.push_back(7);
  generation.max_tokens = 2;
  auto g = engine.submit(generation);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(collect(**g).usage.cached_tokens, 40);
}

TEST_F(EmbeddingEngineTest, EmbeddingRequestsThatCannotBeAreRefused) {
  Engine engine(*model_, *tokenizer_, config(64));
  GenerationRequest two = embedding(prompt(1, 10), Pooling::kMean);
  two.n = 2;
  EXPECT_FALSE(engine.submit(two).ok());
  GenerationRequest logprobs = embedding(prompt(1, 10), Pooling::kMean);
  logprobs.top_logprobs = 2;
  EXPECT_FALSE(engine.submit(logprobs).ok());
  GenerationRequest formatted = embedding(prompt(1, 10), Pooling::kLast);
  formatted.format = OutputFormat::kJsonObject;
  EXPECT_FALSE(engine.submit(formatted).ok());
  EXPECT_FALSE(engine.submit(embedding({}, Pooling::kMean)).ok());
}

}  // namespace
}  // namespace mnemo

// One trace, two drivers of the same cache: the serving engine on a tiny synthetic model, turn
// after turn, and `mnemo simulate`'s replay (sim/cache_replay.h) of the same turns' lengths. Both
// must find the same hits in each tier and move, evict and drop the same chunks: the simulator's
// figures are the engine's.
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/stream_collect.h"
#include "sim/cache_replay.h"
#include "support/tiny_model.h"

namespace mnemo::sim {
namespace {

constexpr int32_t kBlock = 4;

class EngineReplayTest : public ::testing::TestWithParam<RetentionPolicy> {
 protected:
  static void SetUpTestSuite() {
    mnemo::testing::TinyModelSpec spec;
    spec.n_vocab = 300;
    spec.with_tokenizer = true;
    spec.context_length = 256;
    mnemo::testing::LoadedTinyModel loaded = mnemo::testing::load_tiny_model(spec, "engine_replay");
    ASSERT_NE(loaded.model, nullptr);
    ASSERT_NE(loaded.tokenizer, nullptr);
    model_ = loaded.model.release();
    tokenizer_ = loaded.tokenizer.release();
  }
  static void TearDownTestSuite() {
    delete tokenizer_;
    delete model_;
  }
  static Model* model_;
  static Tokenizer* tokenizer_;
};
Model* EngineReplayTest::model_ = nullptr;
Tokenizer* EngineReplayTest::tokenizer_ = nullptr;

// Four conversations' turns, one at a time: (conversation, new user tokens, reply tokens).
struct Step {
  int conversation;
  int32_t user_tokens;
  int32_t reply_tokens;
};
const std::vector<Step> kSteps = {{0, 9, 6}, {1, 13, 5}, {2, 7, 8}, {0, 5, 7}, {3, 11, 6}, {1, 6, 4},
                                  {2, 9, 5}, {0, 6, 5}, {3, 5, 8}, {1, 7, 6}, {2, 4, 7}, {0, 8, 4}};

TEST_P(EngineReplayTest, TheSimulatorsReplayIsTheEngines) {
  EngineConfig config;
  config.threads = 2;
  config.block_size = kBlock;
  config.kv_blocks = 14;  // about two conversations: the others go to the host, or are dropped
  config.host_swap_blocks = 6;
  config.max_batch_tokens = 64;
  config.max_running = 1;
  config.decode_reserve = 0.0f;
  config.swap_out_threshold = 0.0f;  // copies ahead of need depend on the engine's steps
  config.cache_policy = GetParam();
  // The cache's time is the trace's: each turn starts and ends at its step's time (the learnt
  // policy's idle times and Pensieve's values are then the simulator's too).
  std::atomic<double> now{0};
  config.cache_clock = [&now] { return now.load(); };
  Engine engine(*model_, *tokenizer_, config);

  std::map<int, std::vector<TokenId>> context;  // per conversation: prompt and reply so far
  std::map<int, TraceConversation> conversations;
  TokenId next_user_token = 3;
  for (const Step& step : kSteps) {
    now = now.load() + 10;
    std::vector<TokenId>& tokens = context[step.conversation];
    if (tokens.empty()) tokens.push_back(1);
    for (int32_t i = 0; i < step.user_tokens; ++i) tokens.push_back(next_user_token++ % 290 + 5);
    GenerationRequest request;
    request.prompt = tokens;
    request.max_tokens = step.reply_tokens;
    request.sampling.temperature = 0.0f;
    request.ignore_eos = true;
    request.top_logprobs = 0;
    auto stream = engine.submit(request);
    ASSERT_TRUE(stream.ok()) << stream.error().message();
    const mnemo::testing::Collected done = mnemo::testing::collect(**stream);
    ASSERT_TRUE(done.error.empty()) << done.error;
    ASSERT_EQ(done.tokens.size(), static_cast<size_t>(step.reply_tokens));
    // The engine caches the KV it computed: the prompt and every reply token but the last, which
    // was sampled and never run. The simulator's turn is those lengths.
    TraceConversation& c = conversations[step.conversation];
    c.id = std::to_string(step.conversation);
    c.turns.push_back({now.load(), now.load(), static_cast<int64_t>(tokens.size()), step.reply_tokens - 1});
    tokens.insert(tokens.end(), done.tokens.begin(), done.tokens.end());
  }
  const MetricsSnapshot m = engine.metrics();

  Trace trace;
  for (auto& [id, c] : conversations) trace.push_back(c);
  SimConfig sim;
  sim.chunk_tokens = kBlock;
  sim.kv_bytes_per_token = 1;
  sim.capacity_bytes = {config.kv_blocks * kBlock, config.host_swap_blocks * kBlock, 0};
  sim.swap_out_threshold = 0.0f;
  const auto replay = replay_through_cache(trace, sim, GetParam(), "engine's");
  ASSERT_TRUE(replay.ok()) << replay.error().message();
  const PolicyOutcome& o = *replay;

  // The trace does put the cache under pressure, in both tiers.
  EXPECT_GT(m.cache_demoted_chunks, 0u);
  EXPECT_GT(m.cache_dropped_chunks, 0u);
  EXPECT_GT(m.cache_host_hit_tokens, 0u);
  // Hits per tier.
  EXPECT_EQ(static_cast<int64_t>(m.cache_device_hit_tokens), o.hit_tokens[0]);
  EXPECT_EQ(static_cast<int64_t>(m.cache_host_hit_tokens), o.hit_tokens[1]);
  EXPECT_EQ(static_cast<int64_t>(m.cache_disk_hit_tokens), o.hit_tokens[2]);
  // Chunks moved device -> host, evicted from any tier, dropped.
  const auto block_bytes = static_cast<int64_t>(model_->kv_layout(kBlock, config.kv_dtype).block_bytes());
  EXPECT_EQ(static_cast<int64_t>(m.bytes_device_to_host) / block_bytes, o.counters.moved_chunks[0][1]);
  EXPECT_EQ(static_cast<int64_t>(m.bytes_host_to_device) / block_bytes, o.counters.moved_chunks[1][0]);
  EXPECT_EQ(static_cast<int64_t>(m.cache_evicted_copies), o.counters.evicted_chunks[0] + o.counters.evicted_chunks[1]);
  EXPECT_EQ(static_cast<int64_t>(m.cache_dropped_chunks), o.counters.dropped_chunks);
}

INSTANTIATE_TEST_SUITE_P(Policies, EngineReplayTest,
                         ::testing::Values(RetentionPolicy::kLru, RetentionPolicy::kPensieve, RetentionPolicy::kMnemo),
                         [](const ::testing::TestParamInfo<RetentionPolicy>& p) {
                           switch (p.param) {
                             case RetentionPolicy::kLru: return std::string("Lru");
                             case RetentionPolicy::kPensieve: return std::string("Pensieve");
                             case RetentionPolicy::kMnemo: return std::string("Mnemo");
                             default: return std::string("Other");
                           }
                         });

}  // namespace
}  // namespace mnemo::sim

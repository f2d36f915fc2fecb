// The stateful cache on the real default model: a conversation's second turn produces the same
// tokens (greedy and seeded sampling) whether its history's KV is found on the device, brought
// back from the host tier, read from the disk tier after a restart, partly dropped and
// recomputed (SPEC P5), or computed from scratch with the cache off.
#include <gtest/gtest.h>

#include <filesystem>

#include "engine/engine.h"
#include "util/paths.h"

namespace mnemo {
namespace {

struct Turn {
  std::vector<TokenId> tokens;
  RequestUsage usage;
};

Turn collect(RequestStream& stream) {
  Turn t;
  for (;;) {
    auto event = stream.next(std::chrono::milliseconds(120000));
    if (!event) {
      ADD_FAILURE() << "timed out";
      return t;
    }
    if (auto* d = std::get_if<TokenDelta>(&*event)) {
      if (d->token >= 0) t.tokens.push_back(d->token);
    } else if (auto* done = std::get_if<RequestDone>(&*event)) {
      EXPECT_TRUE(done->error.empty()) << done->error;
      t.usage = done->usage;
      return t;
    }
  }
}

class StatefulDefaultModelTest : public ::testing::TestWithParam<float> {
 protected:
  static void SetUpTestSuite() {
    auto model = Model::load(reference_model_path());
    ASSERT_TRUE(model.ok()) << model.error().message() << " (run scripts/setup.sh to fetch the default model)";
    model_ = std::move(*model).release();
    auto tokenizer = Tokenizer::from_gguf(model_->file());
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.error().message();
    tokenizer_ = std::move(*tokenizer).release();
  }
  static void TearDownTestSuite() {
    delete tokenizer_;
    delete model_;
  }

  static EngineConfig config() {
    EngineConfig c;
    c.threads = 2;
    c.block_size = 32;
    c.kv_blocks = 64;
    c.host_swap_blocks = 0;
    c.decode_reserve = 0.0f;
    c.swap_out_threshold = 0.0f;
    return c;
  }

  GenerationRequest request(const std::string& text, int32_t max_tokens) const {
    GenerationRequest r;
    r.prompt = tokenizer_->encode(text, /*add_special=*/true, /*parse_special=*/false);
    r.max_tokens = max_tokens;
    r.ignore_eos = true;
    r.sampling.temperature = GetParam();
    r.sampling.seed = 1234;
    r.top_logprobs = 0;
    return r;
  }
  static Turn run(Engine& engine, const GenerationRequest& r) {
    auto stream = engine.submit(r);
    if (!stream.ok()) {
      ADD_FAILURE() << stream.error().message();
      return {};
    }
    return collect(**stream);
  }

  // Turn 1, then turn 2 = turn 1's prompt + reply + a new message.
  GenerationRequest second_turn(const GenerationRequest& first, const Turn& reply) const {
    GenerationRequest r = first;
    r.prompt.insert(r.prompt.end(), reply.tokens.begin(), reply.tokens.end());
    const auto more = tokenizer_->encode("\nUser: And what happened next in the village?\nAssistant:", false, false);
    r.prompt.insert(r.prompt.end(), more.begin(), more.end());
    r.max_tokens = 24;
    return r;
  }
  // Traffic that needs most of the device pool: `prompt_tokens` and 64 new ones (400 fill 15 of
  // 16 blocks, so at most one block of anything else stays).
  void other_traffic(Engine& engine, size_t prompt_tokens = 400) const {
    GenerationRequest r = request("", 64);
    const auto words = tokenizer_->encode(" apple banana cherry date elderberry fig grape honeydew kiwi lemon", false, false);
    while (r.prompt.size() < prompt_tokens) r.prompt.insert(r.prompt.end(), words.begin(), words.end());
    r.prompt.resize(prompt_tokens);
    run(engine, r);
  }

  static Model* model_;
  static Tokenizer* tokenizer_;
};
Model* StatefulDefaultModelTest::model_ = nullptr;
Tokenizer* StatefulDefaultModelTest::tokenizer_ = nullptr;

constexpr const char* kFirst =
    "User: Tell me a short story about a fox who lived at the edge of a mountain village, and about the "
    "baker who left bread on the windowsill every winter morning.\nAssistant:";

TEST_P(StatefulDefaultModelTest, SecondTurnIsIdenticalFromEveryTierAndFromScratch) {
  const GenerationRequest first = request(kFirst, 120);
  EngineConfig off = config();
  off.prefix_caching = false;
  Engine reference_engine(*model_, *tokenizer_, off);
  const Turn reply = run(reference_engine, first);
  const GenerationRequest second = second_turn(first, reply);
  const Turn expected = run(reference_engine, second);
  std::printf("turn 1: %zu prompt tokens + %zu generated; turn 2: %zu prompt tokens\n", first.prompt.size(),
              reply.tokens.size(), second.prompt.size());
  ASSERT_EQ(expected.usage.cached_tokens, 0);
  ASSERT_EQ(expected.tokens.size(), 24u);

  {  // device
    Engine engine(*model_, *tokenizer_, config());
    EXPECT_EQ(run(engine, first).tokens, reply.tokens);
    const Turn t = run(engine, second);
    EXPECT_EQ(t.usage.device_cached_tokens, 128);  // 38 + 119 computed tokens: 4 whole chunks
    EXPECT_EQ(t.tokens, expected.tokens) << "history on the device";
  }
  {  // host: other traffic pushes the history down
    EngineConfig c = config();
    c.kv_blocks = 16;
    c.host_swap_blocks = 64;
    Engine engine(*model_, *tokenizer_, c);
    run(engine, first);
    other_traffic(engine);
    const Turn t = run(engine, second);
    EXPECT_GT(t.usage.host_cached_tokens, 0);
    EXPECT_EQ(t.tokens, expected.tokens) << "history from the host tier";
  }
  {  // partly dropped: no lower tier, so the history's leading chunks are dropped, the rest kept
    EngineConfig c = config();
    c.kv_blocks = 16;
    Engine engine(*model_, *tokenizer_, c);
    run(engine, first);
    other_traffic(engine);
    const Turn t = run(engine, second);
    EXPECT_GT(t.usage.recomputed_tokens, 0);
    EXPECT_GT(t.usage.cached_tokens, 0);
    EXPECT_EQ(t.tokens, expected.tokens) << "dropped leading chunks recomputed";
  }
  {  // disk, across a restart of the engine
    char tmpl[] = "/tmp/mnemo-stateful-XXXXXX";
    const std::string dir = mkdtemp(tmpl);
    const KvLayout layout = model_->kv_layout(32, DType::F16);
    const auto engine_config = [&] {
      EngineConfig c = config();
      c.disk = std::shared_ptr<DiskTier>(std::move(*DiskTier::open(dir, 1, layout.block_bytes(), 1 << 30)));
      return c;
    };
    {
      Engine engine(*model_, *tokenizer_, engine_config());
      run(engine, first);
    }
    {
      Engine restarted(*model_, *tokenizer_, engine_config());
      const Turn t = run(restarted, second);
      EXPECT_EQ(t.usage.disk_cached_tokens, 128);
      EXPECT_EQ(t.tokens, expected.tokens) << "history from the disk tier after a restart";
    }  // its disk tier finishes its writes before the folder goes
    std::filesystem::remove_all(dir);
  }
}

// Gemma 3's local layers see 512 positions: history a window before the conversation's end
// shrinks to its 3 global layers (1/6 of the bytes), on the device or on its way to the host, and
// still gives identical output.
TEST_P(StatefulDefaultModelTest, SlidingWindowHistoryKeptCompactIsIdentical) {
  ASSERT_GT(model_->config().sliding_window, 0);
  std::string long_text = kFirst;
  while (tokenizer_->encode(long_text, true, false).size() < 700) {
    long_text += " The fox watched the baker, the baker watched the snow, and the village slept under the stars.";
  }
  const GenerationRequest first = request(long_text, 48);
  EngineConfig off = config();
  off.prefix_caching = false;
  off.kv_blocks = 64;
  Engine reference_engine(*model_, *tokenizer_, off);
  const Turn reply = run(reference_engine, first);
  const GenerationRequest second = second_turn(first, reply);
  const Turn expected = run(reference_engine, second);

  for (const bool on_device : {false, true}) {
    EngineConfig c = config();
    c.kv_blocks = 40;
    c.host_swap_blocks = 20;
    c.host_compact_blocks = 64;
    c.compact_on_device = on_device;
    Engine engine(*model_, *tokenizer_, c);
    EXPECT_EQ(run(engine, first).tokens, reply.tokens);
    if (on_device) {
      // 600 + 64 tokens need 21 blocks, 4 more than are free. Of the history's 23 chunks the
      // oldest 7 are compactable; the first 5 shrink (the first's block becomes a slab of six
      // slots, the next 4 free theirs), and everything stays on the device.
      other_traffic(engine, 600);
      const MetricsSnapshot m = engine.metrics();
      EXPECT_EQ(m.device_compact_chunks_cached, 5);
      EXPECT_EQ(m.device_compact_blocks, 1);
      EXPECT_EQ(m.cache_demoted_chunks, 0u);
    } else {
      other_traffic(engine, 1136);  // 1136 + 64 tokens: 38 of the 40 device blocks
      EXPECT_GT(engine.metrics().host_compact_blocks_cached, 0);
    }
    const Turn t = run(engine, second);
    if (on_device) {
      EXPECT_GT(t.usage.cached_tokens, 20 * 32);
      EXPECT_EQ(t.usage.device_cached_tokens, t.usage.cached_tokens);
    } else {
      EXPECT_GT(t.usage.host_cached_tokens, 0);
    }
    EXPECT_EQ(t.usage.recomputed_tokens, 0);
    EXPECT_EQ(t.tokens, expected.tokens) << "history kept as global layers only, " << (on_device ? "on the device" : "on the host");
  }
}

INSTANTIATE_TEST_SUITE_P(Sampling, StatefulDefaultModelTest, ::testing::Values(0.0f, 0.8f),
                         [](const ::testing::TestParamInfo<float>& param_info) {
                           return param_info.param == 0.0f ? std::string("Greedy") : std::string("Seeded");
                         });

}  // namespace
}  // namespace mnemo

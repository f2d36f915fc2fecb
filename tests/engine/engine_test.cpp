// The serving engine on a tiny synthetic model: outputs do not depend on what else runs, on
// chunked prefill, or on preemption (swap or recompute); n > 1 shares the prompt; cancellation
// frees the pool; finish reasons and usage are right.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>
#include <thread>

#include "engine/engine.h"
#include "support/tiny_model.h"

namespace mnemo {
namespace {

using testing::TinyModelSpec;

struct Outcome {
  std::vector<std::vector<TokenId>> tokens;  // per choice
  std::vector<std::string> text;
  std::vector<FinishReason> reasons;
  RequestUsage usage;
  std::string error;
};

Outcome collect(RequestStream& stream) {
  Outcome r;
  for (;;) {
    auto event = stream.next(std::chrono::milliseconds(30000));
    if (!event) {
      ADD_FAILURE() << "timed out waiting for the engine";
      return r;
    }
    if (auto* d = std::get_if<TokenDelta>(&*event)) {
      const auto c = static_cast<size_t>(d->choice);
      if (r.tokens.size() <= c) r.tokens.resize(c + 1), r.text.resize(c + 1), r.reasons.resize(c + 1);
      if (d->token >= 0) r.tokens[c].push_back(d->token);
      r.text[c] += d->text;
    } else if (auto* f = std::get_if<ChoiceFinished>(&*event)) {
      const auto c = static_cast<size_t>(f->choice);
      if (r.tokens.size() <= c) r.tokens.resize(c + 1), r.text.resize(c + 1), r.reasons.resize(c + 1);
      r.reasons[c] = f->reason;
    } else if (auto* done = std::get_if<RequestDone>(&*event)) {
      r.usage = done->usage;
      r.error = done->error;
      return r;
    }
  }
}

GenerationRequest make_request(uint32_t seed, int32_t prompt_len, int32_t max_tokens, float temperature) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<TokenId> dist(3, 299);
  GenerationRequest r;
  r.prompt.push_back(1);
  for (int32_t i = 1; i < prompt_len; ++i) r.prompt.push_back(dist(rng));
  r.max_tokens = max_tokens;
  r.sampling.temperature = temperature;
  r.sampling.seed = seed;
  r.ignore_eos = true;
  r.top_logprobs = 0;  // every token arrives as its own event, with its id
  return r;
}

class EngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    TinyModelSpec spec;
    spec.n_vocab = 300;
    spec.with_tokenizer = true;
    spec.context_length = 256;
    testing::LoadedTinyModel loaded = testing::load_tiny_model(spec, "engine");
    ASSERT_NE(loaded.model, nullptr);
    ASSERT_NE(loaded.tokenizer, nullptr);
    model_ = loaded.model.release();
    tokenizer_ = loaded.tokenizer.release();
  }
  static void TearDownTestSuite() {
    delete tokenizer_;
    delete model_;
  }

  static std::vector<Outcome> run_all(const EngineConfig& config, const std::vector<GenerationRequest>& requests,
                                     MetricsSnapshot* metrics = nullptr) {
    Engine engine(*model_, *tokenizer_, config);
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (const auto& r : requests) {
      auto s = engine.submit(r);
      EXPECT_TRUE(s.ok()) << s.error().message();
      streams.push_back(*s);
    }
    std::vector<Outcome> results;
    for (auto& s : streams) results.push_back(collect(*s));
    if (metrics != nullptr) *metrics = engine.metrics();
    return results;
  }

  static EngineConfig roomy() {
    EngineConfig c;
    c.threads = 2;
    c.block_size = 4;
    c.kv_blocks = 1024;
    c.host_swap_blocks = 0;
    c.max_batch_tokens = 64;
    c.max_running = 32;
    return c;
  }

  static Model* model_;
  static Tokenizer* tokenizer_;
};
Model* EngineTest::model_ = nullptr;
Tokenizer* EngineTest::tokenizer_ = nullptr;

std::vector<GenerationRequest> mixed_requests(int count) {
  std::vector<GenerationRequest> out;
  for (int i = 0; i < count; ++i) {
    out.push_back(make_request(static_cast<uint32_t>(100 + i), 5 + (i * 7) % 40, 12 + i % 9, i % 3 == 0 ? 0.0f : 0.9f));
  }
  return out;
}

void expect_same_outputs(const std::vector<Outcome>& a, const std::vector<Outcome>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].tokens, b[i].tokens) << what << ": request " << i;
    EXPECT_EQ(a[i].text, b[i].text) << what << ": request " << i;
  }
}

TEST_F(EngineTest, OutputIsTheSameAloneOrAmongConcurrentRequests) {
  const auto requests = mixed_requests(12);
  std::vector<Outcome> alone;
  for (const auto& r : requests) alone.push_back(run_all(roomy(), {r})[0]);
  const auto together = run_all(roomy(), requests);
  expect_same_outputs(alone, together, "concurrent");
  for (size_t i = 0; i < requests.size(); ++i) {
    EXPECT_EQ(together[i].tokens[0].size(), static_cast<size_t>(requests[i].max_tokens));
    EXPECT_EQ(together[i].reasons[0], FinishReason::kLength);
    EXPECT_EQ(together[i].usage.prompt_tokens, static_cast<int32_t>(requests[i].prompt.size()));
    EXPECT_EQ(together[i].usage.completion_tokens, requests[i].max_tokens);
  }
}

TEST_F(EngineTest, ChunkedPrefillDoesNotChangeOutput) {
  const auto requests = mixed_requests(6);
  EngineConfig small_chunks = roomy();
  small_chunks.max_batch_tokens = 5;
  expect_same_outputs(run_all(roomy(), requests), run_all(small_chunks, requests), "chunked");
}

TEST_F(EngineTest, PreemptionByRecomputeDoesNotChangeOutput) {
  const auto requests = mixed_requests(10);
  EngineConfig tight = roomy();
  tight.kv_blocks = 40;  // 160 tokens for 10 requests of up to ~65 tokens each
  tight.decode_reserve = 0.0f;
  MetricsSnapshot m;
  const auto constrained = run_all(tight, requests, &m);
  EXPECT_GT(m.preemptions_total, 0u);
  EXPECT_EQ(m.swaps_total, 0u);
  expect_same_outputs(run_all(roomy(), requests), constrained, "recompute");
}

TEST_F(EngineTest, PreemptionBySwapDoesNotChangeOutput) {
  const auto requests = mixed_requests(10);
  EngineConfig tight = roomy();
  tight.kv_blocks = 40;
  tight.host_swap_blocks = 400;
  tight.decode_reserve = 0.0f;
  MetricsSnapshot m;
  const auto constrained = run_all(tight, requests, &m);
  EXPECT_GT(m.swaps_total, 0u);
  expect_same_outputs(run_all(roomy(), requests), constrained, "swap");
}

TEST_F(EngineTest, ParallelSamplesShareThePromptAndDiffer) {
  GenerationRequest r = make_request(7, 30, 16, 1.0f);
  r.n = 4;
  MetricsSnapshot m;
  const Outcome together = run_all(roomy(), {r}, &m)[0];
  ASSERT_EQ(together.tokens.size(), 4u);
  EXPECT_EQ(m.prompt_tokens_total, 30u);
  for (const auto& t : together.tokens) EXPECT_EQ(t.size(), 16u);
  // Distinct choices differ, and each is reproducible on its own.
  EXPECT_NE(together.tokens[0], together.tokens[1]);
  EXPECT_NE(together.tokens[1], together.tokens[2]);
  EXPECT_EQ(run_all(roomy(), {r})[0].tokens, together.tokens);
  // Choice 0 of an n=4 request equals the same request with n=1.
  GenerationRequest single = r;
  single.n = 1;
  EXPECT_EQ(run_all(roomy(), {single})[0].tokens[0], together.tokens[0]);
  EXPECT_EQ(together.usage.completion_tokens, 64);
}

TEST_F(EngineTest, GreedyParallelSamplesAreIdentical) {
  GenerationRequest r = make_request(8, 21, 10, 0.0f);
  r.n = 3;
  const Outcome result = run_all(roomy(), {r})[0];
  ASSERT_EQ(result.tokens.size(), 3u);
  EXPECT_EQ(result.tokens[0], result.tokens[1]);
  EXPECT_EQ(result.tokens[0], result.tokens[2]);
}

TEST_F(EngineTest, CancelledRequestFreesItsBlocks) {
  Engine engine(*model_, *tokenizer_, roomy());
  GenerationRequest r = make_request(9, 20, 200, 0.5f);
  auto stream = engine.submit(r);
  ASSERT_TRUE(stream.ok());
  // Wait for the first tokens, then cancel.
  int tokens = 0;
  while (tokens < 3) {
    auto event = (*stream)->next(std::chrono::milliseconds(10000));
    ASSERT_TRUE(event.has_value());
    if (std::holds_alternative<TokenDelta>(*event)) ++tokens;
  }
  (*stream)->cancel();
  const Outcome rest = collect(**stream);
  ASSERT_FALSE(rest.reasons.empty());
  EXPECT_EQ(rest.reasons[0], FinishReason::kCancelled);
  EXPECT_LT(rest.usage.completion_tokens, 200);
  for (int i = 0; i < 100 && engine.metrics().kv_blocks_used != 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(engine.metrics().kv_blocks_used, 0);
  EXPECT_EQ(engine.metrics().requests_cancelled, 1u);
}

TEST_F(EngineTest, StopStringEndsTheChoiceWithoutEmittingIt) {
  // Run once to learn the text, then stop at a piece of it.
  GenerationRequest r = make_request(10, 12, 24, 0.0f);
  const Outcome full = run_all(roomy(), {r})[0];
  ASSERT_GE(full.text[0].size(), 6u);
  const std::string stop = full.text[0].substr(3, 3);
  r.stop = {stop};
  const Outcome stopped = run_all(roomy(), {r})[0];
  EXPECT_EQ(stopped.reasons[0], FinishReason::kStop);
  EXPECT_EQ(stopped.text[0], full.text[0].substr(0, full.text[0].find(stop)));
}

TEST_F(EngineTest, InvalidRequestsAreRefused) {
  Engine engine(*model_, *tokenizer_, roomy());
  GenerationRequest empty = make_request(1, 4, 4, 0.0f);
  empty.prompt.clear();
  EXPECT_FALSE(engine.submit(empty).ok());
  GenerationRequest bad_token = make_request(1, 4, 4, 0.0f);
  bad_token.prompt[2] = 300;
  EXPECT_FALSE(engine.submit(bad_token).ok());
  GenerationRequest too_long = make_request(1, 256, 4, 0.0f);
  auto refused = engine.submit(too_long);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message().find("context"), std::string::npos);
  EngineConfig small = roomy();
  small.kv_blocks = 8;
  Engine tiny_pool(*model_, *tokenizer_, small);
  auto no_room = tiny_pool.submit(make_request(1, 40, 10, 0.0f));
  ASSERT_FALSE(no_room.ok());
  EXPECT_NE(no_room.error().message().find("KV blocks"), std::string::npos);
  for (const auto* refusal : {&refused, &no_room}) EXPECT_EQ(refusal->error().code(), ErrorCode::kInvalidArgument);
}

TEST_F(EngineTest, AfterShutdownEveryCallAnswersUnavailableAndNothingThrows) {
  Engine engine(*model_, *tokenizer_, roomy());
  engine.shutdown();
  auto submitted = engine.submit(make_request(1, 8, 4, 0.0f));
  ASSERT_FALSE(submitted.ok());
  EXPECT_EQ(submitted.error().code(), ErrorCode::kUnavailable);  // a 503 at the edge, not a 400
  auto exported = engine.export_prefix(0, {1, 2, 3, 4}).get();  // ready, not a broken promise
  ASSERT_FALSE(exported.ok());
  EXPECT_EQ(exported.error().code(), ErrorCode::kUnavailable);
  auto running = engine.export_running(std::make_shared<RequestStream>(), 0).get();
  ASSERT_FALSE(running.ok());
  EXPECT_EQ(running.error().code(), ErrorCode::kUnavailable);
  auto imported = engine.import_prefix(0, {1, 2, 3, 4}, std::vector<uint8_t>(16)).get();
  ASSERT_FALSE(imported.ok());
  EXPECT_EQ(imported.error().code(), ErrorCode::kUnavailable);
}

TEST_F(EngineTest, ExportsOnTheEngineThreadAnswerWithTheirValue) {
  Engine engine(*model_, *tokenizer_, roomy());
  auto exported = engine.export_prefix(0, {1, 2, 3, 4}).get();  // nothing cached: none, but an answer
  ASSERT_TRUE(exported.ok()) << exported.error().message();
  EXPECT_EQ(exported->chunks, 0);
  auto odd = engine.import_prefix(0, {1, 2, 3}, std::vector<uint8_t>(8)).get();  // not whole chunks
  ASSERT_FALSE(odd.ok());
  EXPECT_EQ(odd.error().code(), ErrorCode::kInvalidArgument);  // the import's own error, passed on as it is
}

TEST_F(EngineTest, SecondTurnReusesTheFirstTurnsKvIncludingTheReply) {
  Engine engine(*model_, *tokenizer_, roomy());  // block size 4
  GenerationRequest first = make_request(11, 30, 12, 0.0f);
  auto s1 = engine.submit(first);
  ASSERT_TRUE(s1.ok());
  const Outcome turn1 = collect(**s1);
  EXPECT_EQ(turn1.usage.cached_tokens, 0);
  // The next turn: the whole history (prompt + reply) and a new message.
  GenerationRequest second = first;
  second.prompt.insert(second.prompt.end(), turn1.tokens[0].begin(), turn1.tokens[0].end());
  const size_t history = second.prompt.size();
  for (TokenId t : {40, 41, 42, 43, 44, 45}) second.prompt.push_back(t);
  auto s2 = engine.submit(second);
  ASSERT_TRUE(s2.ok());
  const Outcome turn2 = collect(**s2);
  // Everything computed in turn 1 (prompt and reply but the last sampled token), in whole blocks.
  EXPECT_EQ(turn2.usage.cached_tokens, static_cast<int32_t>((history - 1) / 4 * 4));
  // Same output as with the cache off.
  EngineConfig no_cache = roomy();
  no_cache.prefix_caching = false;
  const Outcome uncached = run_all(no_cache, {second})[0];
  EXPECT_EQ(uncached.usage.cached_tokens, 0);
  EXPECT_EQ(turn2.tokens, uncached.tokens);
  EXPECT_GT(engine.metrics().prefix_cache_hit_tokens, 0u);
}

TEST_F(EngineTest, CacheNamespacesDoNotShare) {
  Engine engine(*model_, *tokenizer_, roomy());
  GenerationRequest a = make_request(12, 30, 4, 0.0f);
  a.cache_namespace = 1;
  collect(**engine.submit(a));
  GenerationRequest b = a;
  b.cache_namespace = 2;
  EXPECT_EQ(collect(**engine.submit(b)).usage.cached_tokens, 0);
  EXPECT_EQ(collect(**engine.submit(a)).usage.cached_tokens, 28);
}

TEST_F(EngineTest, CachedBlocksAreEvictedWhenThePoolIsNeeded) {
  EngineConfig small = roomy();
  small.kv_blocks = 30;  // 120 tokens
  small.decode_reserve = 0.0f;
  Engine engine(*model_, *tokenizer_, small);
  for (uint32_t i = 0; i < 6; ++i) {
    const Outcome r = collect(**engine.submit(make_request(20 + i, 60, 8, 0.0f)));
    EXPECT_EQ(r.usage.completion_tokens, 8) << i;
    EXPECT_TRUE(r.error.empty()) << r.error;
  }
  EXPECT_LE(engine.metrics().kv_blocks_cached, 30);
  EXPECT_GT(engine.metrics().kv_blocks_cached, 0);
}

// Second turns of many conversations at once on a pool that holds about one of them: waiting
// sequences find their cached prefixes (and hold those blocks) while earlier-arrived ones are
// preempted back ahead of them. Whatever the order, every request runs to its end: nothing
// waiting may keep the head of the queue from the blocks it needs.
TEST_F(EngineTest, ManySecondTurnsOnATightPoolAllFinish) {
  for (const float reserve : {0.0f, 0.1f}) {
    EngineConfig tight = roomy();
    tight.kv_blocks = 40;  // 160 tokens; a second turn takes up to 35 blocks
    tight.decode_reserve = reserve;
    tight.max_batch_tokens = 16;
    Engine engine(*model_, *tokenizer_, tight);
    std::vector<GenerationRequest> firsts;
    for (uint32_t i = 0; i < 8; ++i) firsts.push_back(make_request(300 + i, 40 + static_cast<int32_t>(i) * 9, 8, 0.0f));
    for (const GenerationRequest& r : firsts) {
      const Outcome o = collect(**engine.submit(r));
      ASSERT_TRUE(o.error.empty()) << o.error;
    }
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (size_t i = 0; i < firsts.size(); ++i) {
      GenerationRequest second = firsts[i];
      for (TokenId t = 0; t < 24; ++t) second.prompt.push_back(static_cast<TokenId>(50 + (t * 7 + static_cast<TokenId>(i)) % 200));
      second.max_tokens = 16;
      auto s = engine.submit(second);
      ASSERT_TRUE(s.ok()) << s.error().message();
      streams.push_back(*s);
    }
    for (size_t i = 0; i < streams.size(); ++i) {
      const Outcome o = collect(*streams[i]);
      EXPECT_TRUE(o.error.empty()) << "reserve " << reserve << ", request " << i << ": " << o.error;
      EXPECT_EQ(o.usage.completion_tokens, 16) << "reserve " << reserve << ", request " << i;
    }
    EXPECT_GT(engine.metrics().preemptions_total, 0u) << reserve;
  }
}

TEST_F(EngineTest, CachedChunksMoveToHostAndComeBackWithIdenticalOutput) {
  EngineConfig two_tier = roomy();
  two_tier.kv_blocks = 24;  // 96 tokens: one conversation's history at a time
  two_tier.host_swap_blocks = 200;
  two_tier.decode_reserve = 0.0f;
  Engine engine(*model_, *tokenizer_, two_tier);
  GenerationRequest a = make_request(31, 40, 8, 0.0f);
  const Outcome a1 = collect(**engine.submit(a));
  // Other traffic pushes a's cached chunks out of the device pool, to the host.
  for (uint32_t i = 0; i < 3; ++i) collect(**engine.submit(make_request(40 + i, 60, 8, 0.0f)));
  EXPECT_GT(engine.metrics().cache_demoted_chunks, 0u);
  EXPECT_GT(engine.metrics().host_blocks_cached, 0);
  // a's next turn finds its history on the host.
  GenerationRequest a2 = a;
  a2.prompt.insert(a2.prompt.end(), a1.tokens[0].begin(), a1.tokens[0].end());
  a2.prompt.push_back(50);
  const Outcome second = collect(**engine.submit(a2));
  EXPECT_GT(engine.metrics().cache_host_hit_tokens, 0u);
  EXPECT_GT(second.usage.cached_tokens, 0);
  EngineConfig no_cache = roomy();
  no_cache.prefix_caching = false;
  EXPECT_EQ(second.tokens, run_all(no_cache, {a2})[0].tokens);
}

TEST_F(EngineTest, DroppedLeadingChunksAreRecomputedWithIdenticalOutput) {
  EngineConfig one_tier = roomy();
  one_tier.kv_blocks = 24;  // 96 tokens, no host tier: chunks that leave the device are dropped
  one_tier.decode_reserve = 0.0f;
  one_tier.swap_out_threshold = 0.0f;
  Engine engine(*model_, *tokenizer_, one_tier);
  GenerationRequest a = make_request(61, 40, 8, 0.0f);
  const Outcome a1 = collect(**engine.submit(a));
  // Other traffic needs room: a's idle chunks leave, the leading ones first (the cheapest to
  // recompute), while its later chunks stay.
  collect(**engine.submit(make_request(62, 60, 8, 0.0f)));
  EXPECT_GT(engine.metrics().cache_dropped_chunks, 0u);
  GenerationRequest a2 = a;
  a2.prompt.insert(a2.prompt.end(), a1.tokens[0].begin(), a1.tokens[0].end());
  a2.prompt.push_back(50);
  const Outcome second = collect(**engine.submit(a2));
  EXPECT_GT(second.usage.recomputed_tokens, 0);
  EXPECT_GT(second.usage.cached_tokens, 0);
  EXPECT_EQ(second.usage.cached_tokens, second.usage.device_cached_tokens);
  EXPECT_GT(engine.metrics().cache_recomputed_tokens, 0u);
  EngineConfig no_cache = roomy();
  no_cache.prefix_caching = false;
  EXPECT_EQ(second.tokens, run_all(no_cache, {a2})[0].tokens);
}

TEST_F(EngineTest, AConversationsKvOutlivesTheEngineInTheDiskTier) {
  char tmpl[] = "/tmp/mnemo-engine-disk-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const KvLayout layout = model_->kv_layout(4, DType::F16);
  const auto open_disk = [&] {
    auto disk = DiskTier::open(dir, 7, layout.block_bytes(), 1 << 24);
    EXPECT_TRUE(disk.ok());
    return std::shared_ptr<DiskTier>(std::move(*disk));
  };
  GenerationRequest a = make_request(71, 40, 8, 0.0f);
  Outcome a1;
  {
    EngineConfig c = roomy();
    c.disk = open_disk();
    Engine engine(*model_, *tokenizer_, c);
    a1 = collect(**engine.submit(a));
  }
  GenerationRequest a2 = a;
  a2.prompt.insert(a2.prompt.end(), a1.tokens[0].begin(), a1.tokens[0].end());
  a2.prompt.push_back(50);
  Outcome second;
  {
    EngineConfig c = roomy();
    c.disk = open_disk();
    Engine restarted(*model_, *tokenizer_, c);
    EXPECT_EQ(restarted.metrics().disk_chunks_cached, 11);  // 47 computed tokens: 11 whole blocks
    second = collect(**restarted.submit(a2));
  }  // its disk tier finishes its writes before the folder goes
  std::filesystem::remove_all(dir);
  EXPECT_EQ(second.usage.disk_cached_tokens, 44);
  EXPECT_EQ(second.usage.cached_tokens, 44);
  EngineConfig no_cache = roomy();
  no_cache.prefix_caching = false;
  EXPECT_EQ(second.tokens, run_all(no_cache, {a2})[0].tokens);
}

// Failover (SPEC D7): a request resumed with the tokens it had generated elsewhere goes on with
// exactly the tokens and text the uninterrupted run produced after them, in another engine (cold
// cache: the resumed tokens computed) or the same one (warm: found in the cache), and counts the
// resumed tokens as generated.
TEST_F(EngineTest, APersistedRunningRequestCachesEachChunkAsItFillsWithoutChangingItsOutput) {
  // SPEC D7's local disk replica: with persist_running, a chunk goes to the cache (and the disk
  // tier) in the step that fills it, not when the request ends, so a crash loses at most the
  // chunk still filling.
  char tmpl[] = "/tmp/mnemo-engine-persist-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const KvLayout layout = model_->kv_layout(4, DType::F16);
  const auto run = [&](bool persist) {
    EngineConfig c = roomy();
    auto disk = DiskTier::open(dir + (persist ? "/on" : "/off"), 7, layout.block_bytes(), 1 << 24);
    EXPECT_TRUE(disk.ok());
    c.disk = std::shared_ptr<DiskTier>(std::move(*disk));
    Engine engine(*model_, *tokenizer_, c);
    GenerationRequest r = make_request(91, 23, 60, 0.8f);
    r.persist_running = persist;
    auto stream = engine.submit(r);
    EXPECT_TRUE(stream.ok());
    Outcome out;
    uint64_t persisted_at_token_20 = 0;
    for (;;) {
      auto event = (*stream)->next(std::chrono::milliseconds(30000));
      if (!event) {
        ADD_FAILURE() << "timed out waiting for the engine";
        break;
      }
      if (auto* d = std::get_if<TokenDelta>(&*event); d != nullptr && d->token >= 0) {
        out.tokens.resize(1);
        out.tokens[0].push_back(d->token);
        // The step that computed token 19 (position 41) cached chunk 9 before emitting token 20.
        if (out.tokens[0].size() == 20) persisted_at_token_20 = engine.metrics().persisted_running_chunks;
      } else if (std::holds_alternative<RequestDone>(*event)) {
        break;
      }
    }
    return std::make_tuple(out, persisted_at_token_20, engine.metrics().persisted_running_chunks);
  };
  const auto [plain, plain_at_20, plain_total] = run(false);
  const auto [persisted, at_20, total] = run(true);
  std::filesystem::remove_all(dir);
  EXPECT_EQ(plain_at_20, 0u);
  EXPECT_EQ(plain_total, 0u);
  EXPECT_GE(at_20, 10u);  // (23 + 19) / 4 chunks filled
  EXPECT_EQ(total, 20u);  // 23 + 59 computed tokens (the last one never runs): 20 whole chunks
  EXPECT_EQ(persisted.tokens, plain.tokens);
}

TEST_F(EngineTest, AResumedRequestContinuesExactlyWhereItsFirstRunLeftOff) {
  // The text a stream delivers with each token's event (the last entry: text after the last token).
  const auto texts_by_token = [](RequestStream& stream, Outcome& outcome) {
    std::vector<std::string> texts;
    for (;;) {
      auto event = stream.next(std::chrono::milliseconds(30000));
      if (!event) {
        ADD_FAILURE() << "timed out waiting for the engine";
        return texts;
      }
      if (auto* d = std::get_if<TokenDelta>(&*event)) {
        if (d->token >= 0) {
          outcome.tokens.resize(1);
          outcome.tokens[0].push_back(d->token);
          texts.push_back(d->text);
        } else {
          texts.push_back(d->text);  // held-back text let out at the end
        }
      } else if (auto* done = std::get_if<RequestDone>(&*event)) {
        outcome.usage = done->usage;
        return texts;
      }
    }
  };
  const auto join = [](const std::vector<std::string>& parts, size_t from, size_t to) {
    std::string out;
    for (size_t i = from; i < to && i < parts.size(); ++i) out += parts[i];
    return out;
  };
  for (const float temperature : {0.0f, 0.9f}) {
    GenerationRequest whole = make_request(7, 23, 30, temperature);
    whole.top_logprobs = -1;
    whole.report_every_token = true;  // every token, held-back text or not
    whole.stop = {"\xff\xfe"};      // never matched; text is still held back at a cut now and then
    Engine reference(*model_, *tokenizer_, roomy());
    Outcome full;
    const std::vector<std::string> full_texts = texts_by_token(**reference.submit(whole), full);
    ASSERT_EQ(full.tokens.size(), 1u);
    ASSERT_EQ(full.tokens[0].size(), 30u);
    for (const size_t cut : {size_t{1}, size_t{9}, size_t{17}}) {
      GenerationRequest resumed = whole;
      resumed.resume_tokens.assign(full.tokens[0].begin(), full.tokens[0].begin() + static_cast<ptrdiff_t>(cut));
      Engine engine(*model_, *tokenizer_, roomy());
      for (int run = 0; run < 2; ++run) {  // cold, then with the first run's KV cached
        auto stream = engine.submit(resumed);
        ASSERT_TRUE(stream.ok()) << stream.error().message();
        Outcome rest;
        const std::vector<std::string> rest_texts = texts_by_token(**stream, rest);
        const std::vector<TokenId> expected(full.tokens[0].begin() + static_cast<ptrdiff_t>(cut), full.tokens[0].end());
        ASSERT_EQ(rest.tokens.size(), 1u);
        EXPECT_EQ(rest.tokens[0], expected) << "temperature " << temperature << ", cut " << cut << ", run " << run;
        // What the client had, then the rest: the whole text, nothing lost or repeated.
        EXPECT_EQ(join(full_texts, 0, cut) + join(rest_texts, 0, rest_texts.size()), join(full_texts, 0, full_texts.size()));
        EXPECT_EQ(rest.usage.completion_tokens, 30);
        EXPECT_EQ(rest.usage.resumed_tokens, static_cast<int32_t>(cut));
        EXPECT_EQ(rest.usage.prompt_tokens, 23);
        EXPECT_LE(rest.usage.cached_tokens, 23);
        if (run == 1 && cut >= 9) {  // whole chunks of the resumed tokens, below the last token
          EXPECT_GT(rest.usage.resumed_cached_tokens, 0);
        }
      }
    }
  }
}

TEST_F(EngineTest, ResumesThatCannotBeRightAreRefused) {
  Engine engine(*model_, *tokenizer_, roomy());
  GenerationRequest r = make_request(3, 10, 8, 0.0f);
  r.resume_tokens = {5, 6, 7, 8, 9, 10, 11, 12};  // as many as max_tokens: nothing left
  auto all_done = engine.submit(r);
  ASSERT_FALSE(all_done.ok());
  EXPECT_NE(all_done.error().message().find("nothing to generate"), std::string::npos);
  r.resume_tokens = {5, 300};
  EXPECT_FALSE(engine.submit(r).ok());  // outside the vocabulary
  r.resume_tokens = {5};
  r.n = 2;
  EXPECT_FALSE(engine.submit(r).ok());  // only one choice resumes
}

}  // namespace
}  // namespace mnemo

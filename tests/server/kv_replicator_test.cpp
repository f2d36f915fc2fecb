// Replicas of requests in flight (SPEC D7) between two engines on a tiny synthetic model, over two
// real UCX transports on loopback: a request's KV follows it to the replica chunk by chunk, each
// chunk sent once; the replica serves the request's resumption token for token, its generated
// tokens' KV found there instead of computed; a refused increment starts the replica again from
// the first chunk; a replica whose transfers keep failing is given up and the request is unharmed.
// A prompt's chunks stream layer by layer while each prefill step runs (SPEC D3), and the
// receiver caches them only once every layer is in.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <future>
#include <random>
#include <thread>

#include "engine/engine.h"
#include "server/kv_messages.h"
#include "server/kv_receiver.h"
#include "server/kv_replicator.h"
#include "support/tiny_model.h"
#include "support/ucx_under_tsan.h"
#include "transfer/kv_transport.h"

namespace mnemo::server {
namespace {

constexpr uint64_t kFingerprint = 0x7e57;

struct Outcome {
  std::vector<TokenId> tokens;
  RequestUsage usage;
};

// Relays a stream to its end, feeding the replica (if any) as the server's handler does.
Outcome relay(RequestStream& stream, KvReplicator::Replica* replica) {
  Outcome run;
  for (;;) {
    auto event = stream.next(std::chrono::milliseconds(30000));
    if (!event) {
      ADD_FAILURE() << "timed out waiting for the engine";
      return run;
    }
    if (auto* d = std::get_if<TokenDelta>(&*event)) {
      if (d->token < 0) continue;
      run.tokens.push_back(d->token);
      if (replica != nullptr) replica->on_token(d->token);
    } else if (auto* done = std::get_if<RequestDone>(&*event)) {
      run.usage = done->usage;
      if (replica != nullptr) replica->on_finished();
      return run;
    }
  }
}

GenerationRequest make_request(uint32_t seed, int32_t prompt_len, int32_t max_tokens) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<TokenId> dist(3, 299);
  GenerationRequest r;
  r.prompt.push_back(1);
  for (int32_t i = 1; i < prompt_len; ++i) r.prompt.push_back(dist(rng));
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0.9f;
  r.sampling.seed = seed;
  r.ignore_eos = true;
  r.report_every_token = true;
  r.cache_namespace = 5;
  return r;
}

template <typename Predicate>
bool eventually(Predicate done, std::chrono::seconds limit = std::chrono::seconds(30)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

class KvReplicatorTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    mnemo::testing::TinyModelSpec spec;
    spec.n_vocab = 300;
    spec.with_tokenizer = true;
    spec.context_length = 256;
    const std::string path = mnemo::testing::write_tiny_model(spec, "replicator");
    for (Model** model : {&source_model_, &replica_model_}) {
      auto loaded = Model::load(path);
      ASSERT_TRUE(loaded.ok()) << loaded.error().message();
      *model = std::move(*loaded).release();
    }
    auto tokenizer = Tokenizer::from_gguf(source_model_->file());
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.error().message();
    tokenizer_ = std::move(*tokenizer).release();
    std::remove(path.c_str());
  }
  static void TearDownTestSuite() {
    delete tokenizer_;
    delete source_model_;
    delete replica_model_;
  }

  static EngineConfig config() {
    EngineConfig c;
    c.threads = 1;
    c.block_size = 4;
    c.kv_blocks = 256;
    c.host_swap_blocks = 64;
    c.max_batch_tokens = 64;
    return c;
  }

  void SetUp() override {
    source_ = std::make_unique<Engine>(*source_model_, *tokenizer_, config());
    replica_engine_ = std::make_unique<Engine>(*replica_model_, *tokenizer_, config());
    kv_receiver_ = std::make_unique<KvReceiver>(*replica_engine_, kFingerprint);
    auto receiver = transfer::KvTransport::listen(
        "127.0.0.1", 0, [this](transfer::KvMessage&& m, transfer::Acknowledge acknowledge) {
          kv_receiver_->receive(std::move(m), std::move(acknowledge));
        });
    ASSERT_TRUE(receiver.ok()) << receiver.error().message();
    receiver_ = std::move(*receiver);
    auto sender = transfer::KvTransport::listen("127.0.0.1", 0, [](transfer::KvMessage&&) { return ok_status(); });
    ASSERT_TRUE(sender.ok()) << sender.error().message();
    sender_ = std::move(*sender);
    replicator_ = std::make_unique<KvReplicator>(*source_, *sender_, kFingerprint);
  }
  void TearDown() override {
    replicator_.reset();
    sender_.reset();
    receiver_.reset();
  }

  // Runs `request` on the source with a replica on the replica engine; waits until the replica
  // has acknowledged `chunks` chunks (or gave up).
  Outcome run_replicated(const GenerationRequest& request, std::shared_ptr<KvReplicator::Replica>& replica,
                         int32_t known_chunks = 0) {
    auto stream = source_->submit(request);
    EXPECT_TRUE(stream.ok()) << stream.error().message();
    replica = replicator_->open(receiver_->endpoint(), request.cache_namespace, *stream, request.prompt, known_chunks);
    return relay(**stream, replica.get());
  }

  Outcome resume_on_replica(GenerationRequest request, const std::vector<TokenId>& generated, size_t cut) {
    request.resume_tokens.assign(generated.begin(), generated.begin() + static_cast<ptrdiff_t>(cut));
    auto stream = replica_engine_->submit(request);
    EXPECT_TRUE(stream.ok()) << stream.error().message();
    return relay(**stream, nullptr);
  }

  static Model* source_model_;
  static Model* replica_model_;
  static Tokenizer* tokenizer_;
  std::unique_ptr<Engine> source_, replica_engine_;
  std::unique_ptr<KvReceiver> kv_receiver_;
  std::unique_ptr<transfer::KvTransport> receiver_, sender_;
  std::unique_ptr<KvReplicator> replicator_;
};
Model* KvReplicatorTest::source_model_ = nullptr;
Model* KvReplicatorTest::replica_model_ = nullptr;
Tokenizer* KvReplicatorTest::tokenizer_ = nullptr;

TEST_F(KvReplicatorTest, ARequestsKvFollowsItChunkByChunkAndServesItsResumptionThere) {
  const GenerationRequest request = make_request(11, 21, 40);
  std::shared_ptr<KvReplicator::Replica> replica;
  const Outcome run = run_replicated(request, replica);
  ASSERT_EQ(run.tokens.size(), 40u);
  // 61 tokens, all but the last computed: 15 whole chunks of 4.
  ASSERT_TRUE(eventually([&] { return replica->acknowledged_chunks() == 15; })) << replica->acknowledged_chunks();
  const ReplicationStats stats = replicator_->stats();
  EXPECT_EQ(stats.chunks, 15u);  // each chunk sent once
  EXPECT_GE(stats.increments, 1u);  // as the chunks filled (a tiny model may finish before the first is sent)
  EXPECT_EQ(stats.failures, 0u);
  EXPECT_EQ(stats.bytes, 15 * source_model_->kv_layout(4, DType::F16).block_bytes());

  // Resumed on the replica after 30 tokens: the same 10 tokens follow, and the KV of the prompt and
  // of the resumed tokens' whole chunks below the last token (12 chunks: 48 tokens) was there.
  const Outcome rest = resume_on_replica(request, run.tokens, 30);
  EXPECT_EQ(rest.tokens, std::vector<TokenId>(run.tokens.begin() + 30, run.tokens.end()));
  EXPECT_EQ(rest.usage.cached_tokens, 21);
  EXPECT_EQ(rest.usage.resumed_tokens, 30);
  EXPECT_EQ(rest.usage.resumed_cached_tokens, 48 - 21);
  EXPECT_EQ(rest.usage.recomputed_tokens, 0);
}

TEST_F(KvReplicatorTest, ARefusedIncrementStartsTheReplicaAgainFromTheFirstChunk) {
  sender_->inject_faults({.truncate_next = 1});  // the first increment arrives damaged
  const GenerationRequest request = make_request(12, 18, 30);
  std::shared_ptr<KvReplicator::Replica> replica;
  const Outcome run = run_replicated(request, replica);
  // 48 tokens: 11 whole chunks below the last.
  ASSERT_TRUE(eventually([&] { return replica->acknowledged_chunks() == 11; })) << replica->acknowledged_chunks();
  EXPECT_EQ(replicator_->stats().failures, 1u);
  EXPECT_EQ(replicator_->stats().given_up, 0u);
  const Outcome rest = resume_on_replica(request, run.tokens, 25);
  EXPECT_EQ(rest.tokens, std::vector<TokenId>(run.tokens.begin() + 25, run.tokens.end()));
  EXPECT_EQ(rest.usage.resumed_cached_tokens, 40 - 18);  // (18 + 25 - 1) / 4 = 10 chunks
}

TEST_F(KvReplicatorTest, AReplicaThatKeepsFailingIsGivenUpAndTheRequestIsUnharmed) {
  const GenerationRequest request = make_request(13, 18, 30);
  Outcome reference;
  {
    Engine alone(*source_model_, *tokenizer_, config());
    auto stream = alone.submit(request);
    ASSERT_TRUE(stream.ok());
    reference = relay(**stream, nullptr);
  }
  sender_->inject_faults({.truncate_next = 1000});
  std::shared_ptr<KvReplicator::Replica> replica;
  const Outcome run = run_replicated(request, replica);
  EXPECT_EQ(run.tokens, reference.tokens);
  ASSERT_TRUE(eventually([&] { return replicator_->stats().given_up == 1; }));
  EXPECT_EQ(replicator_->stats().failures, 3u);
  EXPECT_EQ(replica->acknowledged_chunks(), 0);
  // Nothing damaged reached the replica's cache: a resumption there computes everything.
  const Outcome rest = resume_on_replica(request, run.tokens, 20);
  EXPECT_EQ(rest.tokens, std::vector<TokenId>(run.tokens.begin() + 20, run.tokens.end()));
  EXPECT_EQ(rest.usage.resumed_cached_tokens, 0);
  EXPECT_EQ(rest.usage.cached_tokens, 0);
}

// A replica for the next turn (Caching-3's copy back to the prefill side) gets nothing while the
// request runs and everything, in one message, once it ends.
TEST_F(KvReplicatorTest, AnAtEndReplicaGetsTheWholeConversationInOneMessageWhenTheRequestEnds) {
  const GenerationRequest request = make_request(16, 21, 40);
  auto stream = source_->submit(request);
  ASSERT_TRUE(stream.ok()) << stream.error().message();
  auto replica = replicator_->open(receiver_->endpoint(), request.cache_namespace, *stream, request.prompt,
                                   /*known_chunks=*/0, /*at_end=*/true);
  // Relay 30 tokens (a running replica would have been sent chunks by now), then wait a while.
  std::vector<TokenId> tokens;
  while (tokens.size() < 30) {
    auto event = (*stream)->next(std::chrono::milliseconds(30000));
    ASSERT_TRUE(event.has_value());
    if (auto* d = std::get_if<TokenDelta>(&*event); d != nullptr && d->token >= 0) {
      tokens.push_back(d->token);
      replica->on_token(d->token);
    }
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(replica->acknowledged_chunks(), 0);
  EXPECT_EQ(replicator_->stats().increments, 0u);
  const Outcome rest = relay(**stream, replica.get());
  ASSERT_EQ(tokens.size() + rest.tokens.size(), 40u);
  // 61 tokens, all but the last computed: 15 whole chunks, in one increment.
  ASSERT_TRUE(replica->wait_settled(std::chrono::seconds(30)));
  EXPECT_EQ(replica->acknowledged_chunks(), 15);
  EXPECT_EQ(replicator_->stats().increments, 1u);
  EXPECT_EQ(replicator_->stats().chunks, 15u);
  // The export ran on the source's engine thread, the import on the replica's: both are counted
  // (once the engine has finished the batch of posted work the task was in, which may be just
  // after the import's acknowledgement went out).
  EXPECT_TRUE(eventually([&] { return source_->metrics().engine_task_seconds > 0.0; }));
  EXPECT_TRUE(eventually([&] { return replica_engine_->metrics().engine_task_seconds > 0.0; }));
}

// An import the engine never runs (it shut down) is answered at once with an error, not left
// for the sender to time out.
TEST_F(KvReplicatorTest, AnImportTheEngineNeverRunsIsRefusedAtOnce) {
  replica_engine_->shutdown();
  std::promise<Status> answered;
  replica_engine_->import_prefix_then(5, {1, 2, 3, 4}, std::vector<uint8_t>(16), 0, 0, [&](Result<int32_t> r) {
    answered.set_value(r.ok() ? ok_status() : Status(r.error()));
  });
  auto future = answered.get_future();
  ASSERT_EQ(future.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  const Status status = future.get();
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.error().message().find("shut down before importing"), std::string::npos) << status.error().message();
}

// A receiver known to hold the leading chunks (a decode instance whose turn came back to the
// prefill side, SPEC M4) is sent only the rest; a wrong guess costs one refusal and a resend.
TEST_F(KvReplicatorTest, ChunksTheReceiverIsKnownToHoldAreNotSentAndAWrongGuessCostsOneResend) {
  const GenerationRequest first_turn = make_request(14, 21, 11);  // 32 tokens: 7 whole chunks below the last
  std::shared_ptr<KvReplicator::Replica> replica;
  const Outcome first = run_replicated(first_turn, replica);
  ASSERT_TRUE(eventually([&] { return replica->acknowledged_chunks() == 7; }));
  ASSERT_EQ(replicator_->stats().chunks, 7u);
  // The next turn starts with the first turn's 32 tokens, which the receiver holds.
  GenerationRequest next_turn = first_turn;
  next_turn.prompt.insert(next_turn.prompt.end(), first.tokens.begin(), first.tokens.end());
  for (TokenId t : {7, 8, 9, 10, 11, 12, 13, 14, 15}) next_turn.prompt.push_back(t);  // 41 tokens
  // (the receiver holds the first turn's 7 whole chunks: 28 of its 32 tokens)
  next_turn.max_tokens = 8;
  const Outcome next = run_replicated(next_turn, replica, /*known_chunks=*/7);
  // 49 tokens: 12 whole chunks below the last; 7 known, 5 sent.
  ASSERT_TRUE(eventually([&] { return replica->acknowledged_chunks() == 12; })) << replica->acknowledged_chunks();
  EXPECT_EQ(replicator_->stats().chunks, 7u + 5u);
  EXPECT_EQ(replicator_->stats().failures, 0u);
  (void)next;

  // A guess past what the receiver holds: refused once, then everything from the first chunk.
  const GenerationRequest other = make_request(15, 21, 11);
  const Outcome third = run_replicated(other, replica, /*known_chunks=*/4);
  ASSERT_TRUE(eventually([&] { return replica->acknowledged_chunks() == 7; })) << replica->acknowledged_chunks();
  EXPECT_EQ(replicator_->stats().failures, 1u);
  EXPECT_EQ(replicator_->stats().chunks, 7u + 5u + 7u);
  (void)third;
}

std::vector<uint8_t> cached_payload(Engine& engine, uint64_t ns, const std::vector<TokenId>& tokens) {
  auto exported = *engine.export_prefix(ns, tokens, 0).get();
  return exported.payload;
}

// A prompt run in two steps (64 + 37 tokens): each step's completed chunks leave layer by layer
// during the step (one message per layer), are cached by the replica once their last layer is in,
// and hold the very bytes the source computed; the rest follows as tokens come.
TEST_F(KvReplicatorTest, APromptsChunksStreamLayerByLayerWhileEachStepRuns) {
  GenerationRequest request = make_request(21, 101, 8);
  auto tap = std::make_shared<ReplicaTap>();
  request.prompt_tap = tap;
  // The replica exists (its tap bound) before the engine can run the prompt's first step.
  auto stream = std::make_shared<RequestStream>();
  const auto replica = replicator_->open(receiver_->endpoint(), request.cache_namespace, stream, request.prompt, 0, false, tap);
  ASSERT_TRUE(source_->submit(request, stream).ok());
  const Outcome run = relay(*stream, replica.get());
  ASSERT_EQ(run.tokens.size(), 8u);
  // 109 tokens: 27 whole chunks below the last. The prompt's steps streamed [0, 16) and [16, 25).
  ASSERT_TRUE(eventually([&] { return replica->acknowledged_chunks() == 27; })) << replica->acknowledged_chunks();
  const auto n_layers = static_cast<uint64_t>(source_model_->config().n_layers);
  const ReplicationStats stats = replicator_->stats();
  EXPECT_EQ(stats.layer_messages, 2 * n_layers);
  EXPECT_EQ(stats.chunks, 27u);  // each chunk once
  EXPECT_EQ(stats.failures, 0u);
  EXPECT_EQ(stats.bytes, 27 * source_model_->kv_layout(4, DType::F16).block_bytes());
  const KvReceiver::Stats received = kv_receiver_->stats();
  EXPECT_EQ(received.slices, 2 * n_layers);
  EXPECT_EQ(received.assembled, 2u);
  EXPECT_EQ(received.pending, 0u);
  // Byte for byte what the source computed, prompt and generated chunks alike.
  std::vector<TokenId> tokens = request.prompt;
  tokens.insert(tokens.end(), run.tokens.begin(), run.tokens.end());
  tokens.pop_back();
  const std::vector<uint8_t> source_kv = cached_payload(*source_, request.cache_namespace, tokens);
  ASSERT_EQ(source_kv.size(), 27 * source_model_->kv_layout(4, DType::F16).block_bytes());
  EXPECT_TRUE(cached_payload(*replica_engine_, request.cache_namespace, tokens) == source_kv);
  // And a resumption there after 4 tokens computes none of it.
  request.prompt_tap.reset();
  const Outcome rest = resume_on_replica(request, run.tokens, 4);
  EXPECT_EQ(rest.tokens, std::vector<TokenId>(run.tokens.begin() + 4, run.tokens.end()));
  EXPECT_EQ(rest.usage.cached_tokens, 101);
  EXPECT_EQ(rest.usage.resumed_cached_tokens, 104 - 101);
}

// A layer lost in transit: nothing partial is cached; the replica starts again from the first
// chunk and ends up complete, byte for byte.
TEST_F(KvReplicatorTest, ALostLayerLeavesNothingPartialAndTheReplicaStartsAgain) {
  GenerationRequest request = make_request(22, 101, 8);
  auto tap = std::make_shared<ReplicaTap>();
  request.prompt_tap = tap;
  sender_->inject_faults({.truncate_next = 1});  // layer 0 of the first step
  // The replica exists (its tap bound) before the engine can run the prompt's first step.
  auto stream = std::make_shared<RequestStream>();
  const auto replica = replicator_->open(receiver_->endpoint(), request.cache_namespace, stream, request.prompt, 0, false, tap);
  ASSERT_TRUE(source_->submit(request, stream).ok());
  const Outcome run = relay(*stream, replica.get());
  ASSERT_TRUE(eventually([&] { return replica->acknowledged_chunks() == 27; })) << replica->acknowledged_chunks();
  EXPECT_EQ(replicator_->stats().failures, 1u);
  // The first step's other layers were dropped with it; the second step streamed from chunk 0 or
  // (if it began before the loss was known) went whole after it.
  const uint64_t layers = replicator_->stats().layer_messages;
  EXPECT_TRUE(layers == 0 || layers == static_cast<uint64_t>(source_model_->config().n_layers)) << layers;
  EXPECT_EQ(kv_receiver_->stats().pending, 0u);
  std::vector<TokenId> tokens = request.prompt;
  tokens.insert(tokens.end(), run.tokens.begin(), run.tokens.end());
  tokens.pop_back();
  EXPECT_TRUE(cached_payload(*replica_engine_, request.cache_namespace, tokens) ==
              cached_payload(*source_, request.cache_namespace, tokens));
}

// The receiver alone: slices in any order, each layer once or again; the chunks are cached only
// when the last layer is in; a slice that disagrees with its group's is refused and changes
// nothing; a whole message goes straight in.
TEST_F(KvReplicatorTest, TheReceiverCachesChunksOnlyWhenEveryLayerIsIn) {
  const GenerationRequest request = make_request(23, 33, 1);
  {
    auto stream = source_->submit(request);
    ASSERT_TRUE(stream.ok());
    relay(**stream, nullptr);
  }
  const std::vector<TokenId> prompt = request.prompt;
  auto exported = *source_->export_prefix(request.cache_namespace, prompt, 0).get();
  ASSERT_EQ(exported.chunks, 8);
  transfer::KvMessage whole = kv_message_of(request.cache_namespace, kFingerprint, 4, std::move(exported));
  const auto n_layers = static_cast<uint32_t>(source_model_->config().n_layers);
  ASSERT_GE(n_layers, 2u);
  const size_t layer_bytes = whole.block_bytes / n_layers;
  const auto slice_of = [&](uint32_t layer) {
    transfer::KvMessage m = whole;
    m.n_layers = n_layers;
    m.layer_begin = layer;
    m.layer_end = layer + 1;
    m.payload.clear();
    for (size_t c = 0; c < whole.chunks.size(); ++c) {
      const uint8_t* at = whole.payload.data() + c * whole.block_bytes + layer * layer_bytes;
      m.payload.insert(m.payload.end(), at, at + layer_bytes);
    }
    return m;
  };
  KvReceiver receiver(*replica_engine_, kFingerprint);
  const auto deliver = [&](transfer::KvMessage m) {
    std::promise<Status> acked;
    receiver.receive(std::move(m), [&](Status s) { acked.set_value(std::move(s)); });
    return acked.get_future().get();
  };
  const auto cached = [&] { return replica_engine_->export_prefix(request.cache_namespace, prompt, 0).get()->chunks; };
  for (uint32_t layer = n_layers; layer-- > 1;) ASSERT_TRUE(deliver(slice_of(layer)).ok()) << layer;
  ASSERT_TRUE(deliver(slice_of(1)).ok());  // again: no harm
  EXPECT_EQ(cached(), 0);
  EXPECT_EQ(receiver.stats().pending, 1u);
  transfer::KvMessage odd = slice_of(0);
  odd.chunks[3].tokens[0] += 1;  // the same group (first key, count), other tokens
  const Status refused = deliver(std::move(odd));
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message().find("disagrees"), std::string::npos) << refused.error().message();
  EXPECT_EQ(cached(), 0);
  ASSERT_TRUE(deliver(slice_of(0)).ok());
  EXPECT_EQ(cached(), 8);
  EXPECT_EQ(receiver.stats().assembled, 1u);
  EXPECT_EQ(receiver.stats().pending, 0u);
  EXPECT_TRUE(replica_engine_->export_prefix(request.cache_namespace, prompt, 0).get()->payload == whole.payload);
  // Another layout is refused before anything is kept.
  transfer::KvMessage foreign = slice_of(0);
  foreign.layout_fingerprint = kFingerprint + 1;
  EXPECT_FALSE(deliver(std::move(foreign)).ok());
  EXPECT_EQ(receiver.stats().pending, 0u);
}

}  // namespace
}  // namespace mnemo::server

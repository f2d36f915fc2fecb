// The KV cache's tiers across shards (kv/remote_device.h, parallel/worker_blocks.h), over real
// stage links on loopback: a coordinator pulls every stage's (or rank's) share of blocks into
// the whole layout, pushes shares back, copies blocks on every worker (block ids outside the
// pools refused), and what it pushed or copied survives a lost worker (the replica holder had it
// too). Then whole engines: one over a
// two-stage pipeline with a small device pool, a host tier and a disk tier, serving several
// multi-turn conversations (later turns hit the host and disk, chunks pulled and pushed) and a
// request with two sampled choices (a copy-on-write on the stages), token for token as one
// instance; and a new coordinator over the same disk, its chunks pushed to the stages.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>

#include "../engine/stream_collect.h"
#include "../kv/kv_test_support.h"
#include "engine/engine.h"
#include "parallel/pipeline.h"
#include "parallel/stage_worker.h"
#include "parallel/tensor_parallel.h"
#include "support/lose_worker.h"
#include "support/tiny_model.h"

namespace mnemo::parallel {
namespace {

using mnemo::testing::TinyModelSpec;

constexpr int32_t kBlockSize = 4;
constexpr int32_t kBlocks = 64;

// `n` workers of the model at `path`, a thread each (fewer, with a test failure, if one does not start).
std::vector<std::unique_ptr<StageWorker>> start_workers(const std::string& path, int n) {
  std::vector<std::unique_ptr<StageWorker>> workers;
  for (int i = 0; i < n; ++i) {
    StageWorkerOptions w;
    w.model_path = path;
    w.threads = 1;
    auto worker = StageWorker::start(w);
    EXPECT_TRUE(worker.ok()) << worker.error().message();
    if (worker.ok()) workers.push_back(std::move(*worker));
  }
  return workers;
}

// The endpoints of workers [begin, end).
std::vector<std::string> endpoints_of(const std::vector<std::unique_ptr<StageWorker>>& workers, size_t begin, size_t end) {
  std::vector<std::string> endpoints;
  for (size_t i = begin; i < end; ++i) endpoints.push_back(workers[i]->endpoint());
  return endpoints;
}

// Two sequences' prefill and two decode steps through `model`, into blocks [0, 8) of `kv`.
void run_steps(Model& model, KvStorage& kv, int32_t n_vocab) {
  ThreadPool pool(1);
  std::mt19937 rng(11);
  std::vector<std::vector<TokenId>> prompts(2, std::vector<TokenId>(16));
  for (auto& p : prompts) {
    for (TokenId& t : p) t = static_cast<TokenId>(rng() % static_cast<uint32_t>(n_vocab));
  }
  for (const auto& [start, length] : std::vector<std::pair<int32_t, int32_t>>{{0, 13}, {13, 1}, {14, 1}}) {
    Batch batch;
    for (size_t s = 0; s < prompts.size(); ++s) {
      SequenceInput seq;
      seq.tokens.assign(prompts[s].begin() + start, prompts[s].begin() + start + length);
      seq.ranges = {{start, length}};
      for (BlockId b = 0; b < 4; ++b) seq.block_table.push_back(static_cast<BlockId>(s) * 4 + b);
      seq.logits = LogitsFor::kLast;
      batch.sequences.push_back(std::move(seq));
    }
    ForwardOutput out;
    const Status status = model.forward(batch, kv, pool, out);
    ASSERT_TRUE(status.ok()) << status.error().message();
  }
}

void randomize(KvStorage& kv, std::span<const BlockId> blocks, uint32_t seed) {
  std::mt19937 rng(seed);
  for (BlockId b : blocks) {
    // Small halves (exponent bits kept low) so the bytes are valid F16 and F32 alike.
    for (size_t i = 0; i < kv.block_bytes(); ++i) kv.block(b)[i] = static_cast<uint8_t>(rng() % 64);
  }
}

bool same_block(const KvStorage& a, const KvStorage& b, BlockId block_a, BlockId block_b) {
  return std::memcmp(a.block(block_a), b.block(block_b), a.block_bytes()) == 0;
}

// Pushes random bytes to blocks 40..43 and copies block 0 into 50, then checks a pull gives them
// back, before and after `lose()` takes a worker away.
template <class Coordinator>
void expect_push_and_copy_survive_a_loss(Coordinator& coordinator, const KvLayout& layout, const std::function<void()>& lose) {
  KvStorage mine(layout, kBlocks);
  const std::vector<BlockId> pushed = {40, 41, 42, 43};
  randomize(mine, pushed, 5);
  ASSERT_TRUE(coordinator.push(pushed, mine).ok());
  const std::pair<BlockId, BlockId> copy{0, 50};
  ASSERT_TRUE(coordinator.copy({&copy, 1}).ok());
  for (int round = 0; round < 2; ++round) {
    if (round == 1) lose();
    KvStorage back(layout, kBlocks);
    const std::vector<BlockId> wanted = {0, 40, 41, 42, 43, 50};
    const Status pulled = coordinator.pull(wanted, back);
    ASSERT_TRUE(pulled.ok()) << pulled.error().message();
    for (BlockId b : pushed) EXPECT_TRUE(same_block(mine, back, b, b)) << "pushed block " << b << ", round " << round;
    EXPECT_TRUE(same_block(back, back, 0, 50)) << "the copy, round " << round;
  }
}

TEST(ShardedCache, APipelinesStagesArePulledPushedAndCopiedAsOnePool) {
  TinyModelSpec spec;
  spec.n_layers = 5;  // stages of 3 and 2 layers
  const std::string path = mnemo::testing::write_tiny_model(spec, "sharded_pipeline");
  auto whole = Model::load(path);
  ASSERT_TRUE(whole.ok());
  LoadOptions head_only;
  head_only.layer_end = 0;
  auto coordinator = Model::load(path, head_only);
  ASSERT_TRUE(coordinator.ok());
  std::vector<std::unique_ptr<StageWorker>> workers = start_workers(path, 3);
  ASSERT_EQ(workers.size(), 3u);
  PipelineOptions options;
  options.step_timeout_seconds = 5;
  options.stages = endpoints_of(workers, 0, 2);
  options.spares = endpoints_of(workers, 2, 3);
  auto pipeline = Pipeline::connect(path, **coordinator, kBlockSize, DType::F16, kBlocks, options);
  ASSERT_TRUE(pipeline.ok()) << pipeline.error().message();
  (*coordinator)->set_layer_runner(pipeline->get());
  const KvLayout layout = (*whole)->kv_layout(kBlockSize);
  KvStorage want(layout, kBlocks), staging(layout, kBlocks);
  run_steps(**whole, want, spec.n_vocab);
  run_steps(**coordinator, staging, spec.n_vocab);
  // The stages' KV, gathered: the whole model's, bit for bit (every layer from its stage).
  KvStorage pulled(layout, kBlocks);
  const std::vector<BlockId> written = {0, 1, 2, 3, 4, 5, 6, 7};
  ASSERT_TRUE((*pipeline)->pull(written, pulled).ok());
  for (BlockId b : written) EXPECT_TRUE(same_block(want, pulled, b, b)) << "block " << b;
  // Block ids the stages' pools do not have are refused by the stage, with the reason.
  const Status outside = (*pipeline)->pull(std::vector<BlockId>{kBlocks}, pulled);
  ASSERT_FALSE(outside.ok());
  EXPECT_NE(outside.error().message().find("a pull of block 64 of a pool of 64"), std::string::npos) << outside.error().message();
  const std::pair<BlockId, BlockId> onto_itself{3, 3};
  const Status self_copy = (*pipeline)->copy({&onto_itself, 1});
  ASSERT_FALSE(self_copy.ok());
  EXPECT_NE(self_copy.error().message().find("a copy of block 3 into 3"), std::string::npos) << self_copy.error().message();
  EXPECT_EQ((*pipeline)->replacements(), 0);
  expect_push_and_copy_survive_a_loss(**pipeline, layout, [&] { mnemo::testing::lose_worker(workers[0]); });
  EXPECT_EQ((*pipeline)->replacements(), 1);
  std::remove(path.c_str());
}

TEST(ShardedCache, TensorRanksArePulledPushedAndCopiedAsOnePool) {
  TinyModelSpec spec;  // SmolLM2's grouping: KV heads 0-1 on rank 0, 2 on rank 1
  spec.n_heads = 9;
  spec.n_kv_heads = 3;
  spec.n_ff = 1024;
  const std::string path = mnemo::testing::write_tiny_model(spec, "sharded_tensor");
  auto whole = Model::load(path);
  ASSERT_TRUE(whole.ok());
  LoadOptions norms_only;
  norms_only.layer_end = 0;
  norms_only.layer_norms = true;
  auto coordinator = Model::load(path, norms_only);
  ASSERT_TRUE(coordinator.ok());
  std::vector<std::unique_ptr<StageWorker>> workers = start_workers(path, 3);
  ASSERT_EQ(workers.size(), 3u);
  TensorParallelOptions options;
  options.step_timeout_seconds = 5;
  options.workers = endpoints_of(workers, 0, 2);
  options.spares = endpoints_of(workers, 2, 3);
  auto tp = TensorParallel::connect(path, **coordinator, kBlockSize, DType::F32, kBlocks, options);
  ASSERT_TRUE(tp.ok()) << tp.error().message();
  (*coordinator)->set_layer_runner(tp->get());
  const KvLayout layout = (*whole)->kv_layout(kBlockSize, DType::F32);
  KvStorage want(layout, kBlocks), staging(layout, kBlocks);
  run_steps(**whole, want, spec.n_vocab);
  run_steps(**coordinator, staging, spec.n_vocab);
  // Every head from its rank: the whole model's KV within the ranks' rounding (the first layer's
  // exactly: its input is the embedding, the same on every rank).
  KvStorage pulled(layout, kBlocks);
  ASSERT_TRUE((*tp)->pull(std::vector<BlockId>{0, 1, 2, 3}, pulled).ok());
  const size_t layer_floats = layout.layer_elems();
  for (BlockId b = 0; b < 4; ++b) {
    const auto* w = reinterpret_cast<const float*>(want.block(b));
    const auto* g = reinterpret_cast<const float*>(pulled.block(b));
    EXPECT_EQ(std::memcmp(w, g, layer_floats * sizeof(float)), 0) << "layer 0 of block " << b;
    float max_diff = 0, max_value = 0;
    for (size_t i = 0; i < layout.block_elems(); ++i) {
      max_diff = std::max(max_diff, std::abs(w[i] - g[i]));
      max_value = std::max(max_value, std::abs(w[i]));
    }
    EXPECT_LE(max_diff, 2e-2f * max_value) << "block " << b;
    EXPECT_GT(max_value, 0.0f);
  }
  expect_push_and_copy_survive_a_loss(**tp, layout, [&] { mnemo::testing::lose_worker(workers[1]); });
  EXPECT_EQ((*tp)->replacements(), 1);
  std::remove(path.c_str());
}

// Greedy and sampled requests of several conversations, two turns each, through an engine.
struct Turn {
  std::vector<TokenId> prompt;
  int32_t n = 1;
};

std::vector<std::vector<TokenId>> serve(Engine& engine, const std::vector<Turn>& turns) {
  std::vector<std::vector<TokenId>> outputs;
  for (const Turn& turn : turns) {
    GenerationRequest r;
    r.prompt = turn.prompt;
    r.max_tokens = 6;
    r.n = turn.n;
    r.ignore_eos = true;
    r.top_logprobs = 0;
    r.sampling.temperature = turn.n > 1 ? 0.9f : 0.0f;
    r.sampling.seed = 7;
    auto stream = engine.submit(r);
    EXPECT_TRUE(stream.ok()) << stream.error().message();
    if (!stream.ok()) return outputs;
    const mnemo::testing::Collected got = mnemo::testing::collect(**stream);
    EXPECT_TRUE(got.error.empty()) << got.error;
    outputs.push_back(got.tokens);
  }
  return outputs;
}

// Conversations of 36-token first turns, then each extended (its tokens as the engine sees them
// need not match: a later turn shares whole chunks of the first turn's prompt).
std::vector<Turn> conversations(int count, int32_t n_vocab) {
  std::mt19937 rng(3);
  std::vector<Turn> turns;
  std::vector<std::vector<TokenId>> firsts;
  for (int c = 0; c < count; ++c) {
    std::vector<TokenId> p = {1};
    for (int i = 1; i < 36; ++i) p.push_back(static_cast<TokenId>(3 + rng() % static_cast<uint32_t>(n_vocab - 3)));
    firsts.push_back(p);
    turns.push_back({p});
  }
  for (int c = 0; c < count; ++c) {
    std::vector<TokenId> p = firsts[static_cast<size_t>(c)];
    for (int i = 0; i < 12; ++i) p.push_back(static_cast<TokenId>(3 + rng() % static_cast<uint32_t>(n_vocab - 3)));
    turns.push_back({p});
  }
  // Two choices of a prompt that ends inside a block: both write the shared block next, and the
  // second to do so gets a copy.
  std::vector<TokenId> forked = firsts[0];
  forked.insert(forked.end(), {5, 6});
  turns.push_back({forked, 2});
  return turns;
}

EngineConfig small_pool(std::shared_ptr<DiskTier> disk) {
  EngineConfig c;
  c.threads = 1;
  c.block_size = kBlockSize;
  c.kv_blocks = 40;  // 160 tokens: six conversations of 42 do not fit
  c.host_swap_blocks = 24;
  c.max_batch_tokens = 64;
  c.disk = std::move(disk);
  c.cache_policy = RetentionPolicy::kLru;
  return c;
}

TEST(ShardedCache, AnEngineOverAPipelineUsesTheHostAndDiskTiersAsOneInstance) {
  TinyModelSpec spec;
  spec.n_layers = 4;
  spec.n_vocab = 300;
  spec.with_tokenizer = true;
  const std::string path = mnemo::testing::write_tiny_model(spec, "sharded_engine");
  auto whole = Model::load(path);
  ASSERT_TRUE(whole.ok());
  auto tokenizer = Tokenizer::from_gguf((*whole)->file());
  ASSERT_TRUE(tokenizer.ok());
  const KvLayout layout = (*whole)->kv_layout(kBlockSize);
  const auto open_disk = [&](const std::string& dir) {
    auto disk = DiskTier::open(dir, 77, layout.block_bytes(), 1 << 22);
    EXPECT_TRUE(disk.ok());
    return disk.ok() ? std::move(*disk) : nullptr;
  };
  const std::vector<Turn> turns = conversations(6, spec.n_vocab);
  std::vector<std::vector<TokenId>> want;
  MetricsSnapshot whole_metrics;
  {
    // Chunks come back at match time, as they do from a remote device, so the two caches' plans
    // are the same step for step.
    EngineConfig c = small_pool(nullptr);
    c.layerwise_swap_in = false;
    Engine engine(**whole, **tokenizer, c);
    want = serve(engine, turns);
    whole_metrics = engine.metrics();
  }
  ASSERT_GT(whole_metrics.cache_host_hit_tokens, 0u);  // the scenario reaches the host tier
  LoadOptions head_only;
  head_only.layer_end = 0;
  auto coordinator = Model::load(path, head_only);
  ASSERT_TRUE(coordinator.ok());
  std::vector<std::unique_ptr<StageWorker>> workers = start_workers(path, 2);
  ASSERT_EQ(workers.size(), 2u);
  PipelineOptions options;
  options.step_timeout_seconds = 10;
  options.stages = endpoints_of(workers, 0, 2);
  auto pipeline = Pipeline::connect(path, **coordinator, kBlockSize, DType::F16, small_pool(nullptr).kv_blocks, options);
  ASSERT_TRUE(pipeline.ok()) << pipeline.error().message();
  (*coordinator)->set_layer_runner(pipeline->get());
  const auto sharded = [&](std::shared_ptr<DiskTier> disk) {
    EngineConfig c = small_pool(std::move(disk));
    c.remote_device = pipeline->get();
    return c;
  };
  {  // The host tier alone: the same chunks leave and come back, and as many, as on one instance.
    Engine engine(**coordinator, **tokenizer, sharded(nullptr));
    EXPECT_EQ(serve(engine, turns), want);
    const MetricsSnapshot m = engine.metrics();
    EXPECT_EQ(m.cache_host_hit_tokens, whole_metrics.cache_host_hit_tokens);
    EXPECT_EQ(m.cache_demoted_chunks, whole_metrics.cache_demoted_chunks);
    EXPECT_GT(m.cache_remote_pulled_blocks, 0u);
    EXPECT_GT(m.cache_remote_pushed_blocks, 0u);
    EXPECT_EQ(m.cache_remote_failures, 0u);
  }
  // With a disk tier (which chunks the host keeps then depends on when the disk's writes land).
  mnemo::testing::TempDir dir;
  {
    Engine engine(**coordinator, **tokenizer, sharded(open_disk(dir.path)));
    EXPECT_EQ(serve(engine, turns), want);
    EXPECT_GT(engine.metrics().cache_disk_written_chunks, 0u);
  }
  // A new coordinator over the same disk and stages: the second turns come from the disk, their
  // chunks pushed to the stages, and the outputs are the same.
  Engine engine(**coordinator, **tokenizer, sharded(open_disk(dir.path)));
  const std::vector<Turn> second_turns(turns.begin() + 6, turns.begin() + 12);
  const std::vector<std::vector<TokenId>> again = serve(engine, second_turns);
  EXPECT_EQ(again, std::vector<std::vector<TokenId>>(want.begin() + 6, want.begin() + 12));
  EXPECT_GT(engine.metrics().cache_disk_hit_tokens, 0u);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace mnemo::parallel

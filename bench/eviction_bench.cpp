// Eviction at scale, metadata only (issue 25): making room for one chunk in a device tier of
// 10^4, 10^5 and 10^6 cached chunks under each retention policy. One iteration is what
// KvCache::make_room does for one block: find the chunk that leaves first
// (EvictionOrder::lowest) and drop its copy; then its conversation comes back (re-inserted, as a
// new turn's cache_prefix does) so the tier keeps its size. No KV bytes, no allocator: the
// index and the victim search alone. Google Benchmark:
//   build/release/bench/mnemo_eviction_bench --benchmark_filter=Evict
#include <benchmark/benchmark.h>

#include <memory>
#include <random>
#include <vector>

#include "kv/eviction_order.h"
#include "kv/prefix_index.h"

namespace mnemo {
namespace {

constexpr int32_t kChunkTokens = 4;
constexpr int32_t kChunksPerConversation = 16;

struct CachedTier {
  std::unique_ptr<PrefixIndex> index;
  std::vector<std::vector<TokenId>> conversations;
  std::vector<std::vector<BlockId>> blocks;
  double now = 0;
};

// Conversations whose tokens name them (no two share a prefix), idle for up to an hour.
CachedTier cached_tier(int64_t chunks) {
  CachedTier t;
  t.index = std::make_unique<PrefixIndex>(kChunkTokens);
  const int64_t n = chunks / kChunksPerConversation;
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> idle(0.0, 3600.0);
  BlockId next_block = 0;
  for (int64_t c = 0; c < n; ++c) {
    std::vector<TokenId> tokens(kChunksPerConversation * kChunkTokens);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<TokenId>(c * 1000 + static_cast<int64_t>(i));
    std::vector<BlockId> blocks(kChunksPerConversation);
    for (auto& b : blocks) b = next_block++;
    t.index->insert(0, tokens, blocks, 3600.0 - idle(rng));
    t.conversations.push_back(std::move(tokens));
    t.blocks.push_back(std::move(blocks));
  }
  t.now = 3600.0;
  return t;
}

void MakeRoomForOneChunk(benchmark::State& state) {
  const auto policy = static_cast<RetentionPolicy>(state.range(1));
  CachedTier t = cached_tier(state.range(0));
  ChunkGeometry geometry;
  geometry.chunk_tokens = kChunkTokens;
  EvictionOrder order(policy, CostModel{}, RetentionOptions{}, geometry);
  const auto any = [](const PrefixIndex::Chunk&) { return true; };
  for (auto _ : state) {
    t.now += 0.001;
    const auto victim = order.lowest(*t.index, Tier::kDevice, any, t.now);
    if (!victim) {
      state.SkipWithError("empty tier");
      break;
    }
    const auto tokens = t.index->chunk_tokens_of(victim->node);
    const int64_t conversation = tokens[0] / 1000;
    t.index->set_device(victim->node, kNoBlock);
    // The conversation's next turn: its chunks cached again, the dropped one in its old block.
    t.index->insert(0, t.conversations[conversation], t.blocks[conversation], t.now);
  }
  state.counters["chunks"] = static_cast<double>(t.index->size(Tier::kDevice));
}

BENCHMARK(MakeRoomForOneChunk)
    ->ArgNames({"chunks", "policy"})
    ->ArgsProduct({{10'000, 100'000, 1'000'000},
                   {static_cast<int64_t>(RetentionPolicy::kLru), static_cast<int64_t>(RetentionPolicy::kPensieve),
                    static_cast<int64_t>(RetentionPolicy::kMnemo)}})
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace mnemo

BENCHMARK_MAIN();

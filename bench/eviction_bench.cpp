// Eviction at scale, metadata only (issue 25): making room for one chunk in a device tier of
// 10^4, 10^5 and 10^6 cached chunks under each retention policy, by the eviction order's
// classes (search 0, what KvCache runs) and by the exact scan (search 1). One iteration is what
// KvCache::make_room does for one block: find the chunk that leaves first
// (EvictionOrder::lowest) and drop its copy. Untimed, once a 64th of the tier is gone, the
// conversations that lost chunks come back (re-inserted, as a new turn's cache_prefix does) so
// the tier keeps its size. No KV bytes, no allocator: the
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
  const bool by_scan = state.range(2) != 0;
  CachedTier t = cached_tier(state.range(0));
  ChunkGeometry geometry;
  geometry.chunk_tokens = kChunkTokens;
  EvictionOrder order(policy, CostModel{}, RetentionOptions{}, geometry);
  order.rank(*t.index);
  const auto any = [](const PrefixIndex::Chunk&) { return true; };
  const size_t full = t.index->size(Tier::kDevice);
  std::vector<int64_t> emptied;
  for (auto _ : state) {
    t.now += 0.001;
    const auto victim = by_scan ? order.lowest_by_scan(*t.index, PrefixIndex::Copies::kDevice, any, t.now)
                                : order.lowest(*t.index, Tier::kDevice, any, t.now);
    if (!victim) {
      state.SkipWithError("empty tier");
      break;
    }
    emptied.push_back(t.index->chunk_tokens_of(victim->node)[0] / 1000);
    t.index->set_device(victim->node, kNoBlock);
    if (t.index->size(Tier::kDevice) < full - full / 64) {
      // Untimed: the conversations that lost chunks come back (a new turn caches them again).
      state.PauseTiming();
      for (const int64_t c : emptied) {
        t.index->insert(0, t.conversations[static_cast<size_t>(c)], t.blocks[static_cast<size_t>(c)], t.now);
      }
      emptied.clear();
      state.ResumeTiming();
    }
  }
  state.counters["chunks"] = static_cast<double>(t.index->size(Tier::kDevice));
}

BENCHMARK(MakeRoomForOneChunk)
    ->ArgNames({"chunks", "policy", "search"})
    ->ArgsProduct({{10'000, 100'000, 1'000'000},
                   {static_cast<int64_t>(RetentionPolicy::kLru), static_cast<int64_t>(RetentionPolicy::kPensieve),
                    static_cast<int64_t>(RetentionPolicy::kMnemo)},
                   {0, 1}})
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace mnemo

BENCHMARK_MAIN();

// The eviction order's victim search by classes (EvictionOrder::rank) against the exact scan
// over every chunk: on random caches (conversations sharing prefixes, copies moving between
// tiers, chunks dropped, touched, ended and pinned by a client, pins running out), with a learnt model whose classes split, and with
// eligibility filters, every policy and every kind of copy gives the same victim, step by step.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "kv/eviction_order.h"

namespace mnemo::testing {
namespace {

constexpr int32_t kChunkTokens = 2;

struct RandomCache {
  PrefixIndex index{kChunkTokens};
  std::vector<std::vector<TokenId>> conversations;
  BlockId next_block = 0;
  double now = 100;
};

// A conversation: an earlier one's prefix (sometimes) and tokens of its own, 1 to 40 chunks.
std::vector<TokenId> conversation(RandomCache& cache, std::mt19937& rng) {
  std::vector<TokenId> tokens;
  if (!cache.conversations.empty() && rng() % 3 == 0) {
    const auto& base = cache.conversations[rng() % cache.conversations.size()];
    const size_t keep = (rng() % (base.size() / kChunkTokens + 1)) * kChunkTokens;
    tokens.assign(base.begin(), base.begin() + static_cast<std::ptrdiff_t>(keep));
  }
  const auto chunks = static_cast<int32_t>(1 + rng() % 40);
  for (int32_t i = 0; i < chunks * kChunkTokens; ++i) tokens.push_back(static_cast<TokenId>(rng() % 50'000));
  return tokens;
}

// One random event: a conversation cached (or cached again), a path matched, a copy moved.
void step(RandomCache& cache, EvictionOrder& order, std::mt19937& rng) {
  cache.now += static_cast<double>(rng() % 1000) / 100.0;
  cache.index.expire_pins(cache.now);
  const uint32_t what = rng() % 6;
  if (what <= 1 || cache.conversations.empty()) {
    auto tokens = what == 1 && !cache.conversations.empty() ? cache.conversations[rng() % cache.conversations.size()]
                                                            : conversation(cache, rng);
    std::vector<BlockId> blocks(tokens.size() / kChunkTokens);
    for (auto& b : blocks) b = cache.next_block++;
    const auto kept = cache.index.insert(0, tokens, blocks, cache.now);
    order.observe_insert(static_cast<int32_t>(blocks.size()), static_cast<int32_t>(kept.size()), cache.now);
    cache.conversations.push_back(std::move(tokens));
    return;
  }
  const auto& tokens = cache.conversations[rng() % cache.conversations.size()];
  const auto path = cache.index.path(0, tokens);
  if (path.empty()) return;
  const PrefixIndex::NodeId node = path[rng() % path.size()];
  if (what == 2) {
    order.observe_returns(cache.index.match(0, tokens, static_cast<int32_t>(rng() % 40), cache.now), cache.now);
  } else if (what == 3) {
    cache.index.set_host(node, cache.next_block++, rng() % 4 == 0);
  } else if (what == 4) {
    cache.index.set_disk(node, rng() % 2 == 0 ? DiskCopy::kPresent : DiskCopy::kWriting);
  } else if (rng() % 8 == 0) {
    cache.index.set_ended(node);  // its conversation's client ended it
  } else if (rng() % 6 == 0) {
    cache.index.pin(node, cache.now + static_cast<double>(rng() % 60));  // a client's keep-alive
  } else {
    const PrefixIndex::Chunk c = cache.index.chunk(node);
    if (c.device != kNoBlock && rng() % 2 == 0) {
      cache.index.set_device_slot(node, cache.next_block++);
    }
    if (rng() % 2 == 0) {
      cache.index.set_device(node, kNoBlock);  // may drop or forget it
      if (cache.index.live(node) && cache.index.chunk(node).dropped()) order.observe_drop(c, cache.now);
    }
  }
}

void expect_same_victims(const RandomCache& cache, const EvictionOrder& order, std::mt19937& rng) {
  const uint32_t salt = rng();
  const std::function<bool(const PrefixIndex::Chunk&)> filters[] = {
      [](const PrefixIndex::Chunk&) { return true; },
      [salt](const PrefixIndex::Chunk& c) { return ((static_cast<uint64_t>(c.node) * 2654435761u) ^ salt) % 3 != 0; },
      [](const PrefixIndex::Chunk& c) { return c.has(Tier::kHost) || c.has(Tier::kDisk); },
  };
  for (const auto kind : {PrefixIndex::Copies::kDevice, PrefixIndex::Copies::kHost, PrefixIndex::Copies::kDisk,
                          PrefixIndex::Copies::kDeviceSlot}) {
    for (const auto& eligible : filters) {
      const auto fast = order.lowest(cache.index, kind, eligible, cache.now);
      const auto exact = order.lowest_by_scan(cache.index, kind, eligible, cache.now);
      ASSERT_EQ(fast.has_value(), exact.has_value());
      if (fast) {
        ASSERT_EQ(fast->node, exact->node) << "kind " << static_cast<int>(kind) << " at " << cache.now;
      }
    }
  }
}

void replay_and_compare(RetentionPolicy policy, ChunkGeometry geometry, uint32_t seed) {
  RetentionOptions options;
  options.class_split_statistic = 0.5;  // classes of the learnt model split early: several of them
  options.refresh_interval_s = 5;
  CostModel cost;
  cost.per_context_token_seconds = 1e-3;  // a chunk's recompute grows with its position
  EvictionOrder order(policy, cost, options, geometry);
  RandomCache cache;
  order.rank(cache.index);
  std::mt19937 rng(seed);
  size_t most_pinned = 0;
  for (int i = 0; i < 1500; ++i) {
    step(cache, order, rng);
    most_pinned = std::max(most_pinned, cache.index.n_pinned());
    if (i % 10 == 0) expect_same_victims(cache, order, rng);
    if (::testing::Test::HasFatalFailure()) return;
  }
  EXPECT_GT(cache.index.size(Tier::kDevice), 100u);
  EXPECT_GT(cache.index.size(Tier::kHost), 10u);
  EXPECT_GT(most_pinned, 0u);
}

ChunkGeometry full_layers() {
  ChunkGeometry g;
  g.chunk_tokens = kChunkTokens;
  g.n_layers = 4;
  g.chunk_bytes = 4096;
  return g;
}

ChunkGeometry sliding_window() {
  ChunkGeometry g = full_layers();
  g.global_layers = 1;
  g.sliding_window = 8;
  return g;
}

TEST(EvictionClasses, LruFindsWhatTheScanFinds) { replay_and_compare(RetentionPolicy::kLru, full_layers(), 1); }

TEST(EvictionClasses, PensieveFindsWhatTheScanFinds) { replay_and_compare(RetentionPolicy::kPensieve, full_layers(), 2); }

TEST(EvictionClasses, LearntPolicyFindsWhatTheScanFinds) { replay_and_compare(RetentionPolicy::kMnemo, full_layers(), 3); }

TEST(EvictionClasses, LearntPolicyOfASlidingWindowModelFindsWhatTheScanFinds) {
  replay_and_compare(RetentionPolicy::kMnemo, sliding_window(), 4);
}

TEST(EvictionClasses, TheLearntPolicyRanksByItsReturnClasses) {
  EvictionOrder order(RetentionPolicy::kMnemo, CostModel{}, RetentionOptions{}, full_layers());
  PrefixIndex index(kChunkTokens);
  order.rank(index);
  // Conversations of 1, 2 and 3 chunks: three return classes (half octaves), three ranks.
  index.insert(0, std::vector<TokenId>{1, 2}, std::vector<BlockId>{0}, 1);
  index.insert(0, std::vector<TokenId>{3, 4, 5, 6}, std::vector<BlockId>{1, 2}, 2);
  index.insert(0, std::vector<TokenId>{7, 8, 9, 10, 11, 12}, std::vector<BlockId>{3, 4, 5}, 3);
  EXPECT_EQ(index.n_rank_classes(PrefixIndex::Copies::kDevice), 3u);
  // A conversation growing moves its chunks to its new class; a chunk losing its copy leaves.
  index.insert(0, std::vector<TokenId>{1, 2, 13, 14, 15, 16}, std::vector<BlockId>{0, 6, 7}, 4);
  EXPECT_EQ(index.n_rank_classes(PrefixIndex::Copies::kDevice), 2u);
  index.set_device(*index.node_at(0, Tier::kDevice), kNoBlock);
  size_t visited = 0;
  index.visit_oldest_per_class(PrefixIndex::Copies::kDevice, [&](const PrefixIndex::Chunk&) {
    ++visited;
    return false;
  });
  EXPECT_EQ(visited, 7u);
}

TEST(EvictionClasses, SlruFindsWhatTheScanFinds) { replay_and_compare(RetentionPolicy::kSlru, full_layers(), 5); }

TEST(EvictionClasses, ArcFindsWhatTheScanFinds) { replay_and_compare(RetentionPolicy::kArc, full_layers(), 6); }

}  // namespace
}  // namespace mnemo::testing

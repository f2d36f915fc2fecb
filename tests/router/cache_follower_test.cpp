// CacheFollower: the events endpoint's replies applied in order (snapshots, inserts, evicts),
// pending keys with their TTL, malformed replies refused whole. Its thread polls an address where
// nothing listens (port 1): it retries in the background and never touches what the test applies.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "router/cache_follower.h"

namespace mnemo::router {
namespace {

using nlohmann::json;

constexpr int kNone = 0, kCompact = 1, kWhole = 2;  // ChunkHold on the wire

json reply(bool snapshot, std::vector<uint64_t> held, json events, uint64_t next = 1,
           std::vector<uint64_t> compact = {}, int sliding_window = 0) {
  json r = {{"epoch", 7},          {"next", next},          {"snapshot", snapshot},
            {"events", events},    {"chunk_tokens", 32},    {"sliding_window", sliding_window}};
  if (snapshot) {
    r["held"] = held;
    r["compact"] = compact;
  }
  return r;
}

TEST(CacheFollower, FollowsSnapshotsAndEventsInOrder) {
  CacheFollower f("http://127.0.0.1:1");
  EXPECT_FALSE(f.following());
  const std::vector<uint64_t> prompt = {11, 12, 13, 14};
  EXPECT_EQ(f.matched_chunks(prompt, 0), 0u);
  ASSERT_TRUE(f.apply(reply(true, {11, 12, 99}, json::array())).ok());
  EXPECT_TRUE(f.following());
  EXPECT_EQ(f.chunk_tokens(), 32);
  EXPECT_EQ(f.matched_chunks(prompt, 0), 2u);
  // 13 and 14 arrive; then 12 loses its last copy. Its tokens stay indexed below 11 (13 and 14
  // hang below it), so the instance recomputes it in place and reuses the rest: 3 chunks.
  ASSERT_TRUE(f.apply(reply(false, {}, json::array({json::array({13, kWhole}), json::array({14, kWhole})}))).ok());
  EXPECT_EQ(f.matched_chunks(prompt, 0), 4u);
  ASSERT_TRUE(f.apply(reply(false, {}, json::array({json::array({12, kNone})}))).ok());
  EXPECT_EQ(f.matched_chunks(prompt, 0), 3u);
  EXPECT_EQ(f.matched_chunks(prompt, 0, /*include_pending=*/false), 1u);  // confirmed whole, leading
  EXPECT_EQ(f.matched_chunks(std::vector<uint64_t>{11, 12}, 0), 1u);  // a dropped last chunk saves nothing
  EXPECT_EQ(f.held_chunks(), 4u);  // 11, 13, 14, 99
  // A new snapshot (the instance restarted) replaces everything.
  ASSERT_TRUE(f.apply(reply(true, {12}, json::array())).ok());
  EXPECT_EQ(f.matched_chunks(prompt, 0), 1u);  // 11 dropped there (12 hangs below it): recomputed in place
  EXPECT_EQ(f.matched_chunks(prompt, 0, /*include_pending=*/false), 0u);
  EXPECT_EQ(f.held_chunks(), 1u);
}

// Sliding-window history: compact chunks (global layers only) count where no position the
// instance computes is within a window of them, as kv/chunk_reuse.h decides for the instance.
TEST(CacheFollower, CompactChunksCountOnlyAWindowBeforeWhatIsComputed) {
  CacheFollower f("http://127.0.0.1:1");
  // Chunks of 32 tokens, a window of 64: chunks 0-3 compact, 4-6 whole.
  ASSERT_TRUE(f.apply(reply(true, {5, 6, 7}, json::array(), 1, {1, 2, 3, 4}, 64)).ok());
  const std::vector<uint64_t> prompt = {1, 2, 3, 4, 5, 6, 7};
  // The new tokens start at 224: a compact chunk needs its end + 63 <= 224, true up to chunk 4.
  EXPECT_EQ(f.matched_chunks(prompt, 0), 7u);
  EXPECT_EQ(f.held_chunks(), 7u);
  EXPECT_EQ(f.compact_chunks(), 4u);
  // A prompt ending after chunk 4: new tokens from 160. Chunk 3 (ends at 128) is within the
  // window and is recomputed, which puts chunk 2 within a window of computed positions, and so
  // on down to chunk 0: only chunk 4 is reused.
  EXPECT_EQ(f.matched_chunks(std::span(prompt).first(5), 0), 1u);
  // Conservative: no leading whole chunk.
  EXPECT_EQ(f.matched_chunks(prompt, 0, /*include_pending=*/false), 0u);
  // Chunk 1 becomes whole again, chunk 7 compact.
  ASSERT_TRUE(
      f.apply(reply(false, {}, json::array({json::array({1, kWhole}), json::array({7, kCompact})}), 2, {}, 64)).ok());
  EXPECT_EQ(f.matched_chunks(prompt, 0, false), 1u);
  // Chunk 6, compact at the end, is recomputed (and left off: it saves nothing); chunk 3 ends
  // a window before 192 and stays.
  EXPECT_EQ(f.matched_chunks(prompt, 0), 6u);
}

TEST(CacheFollower, PendingKeysCountUntilTheirTtlOrAnEvictEvent) {
  CacheFollower f("http://127.0.0.1:1", "", /*pending_ttl_seconds=*/10);
  ASSERT_TRUE(f.apply(reply(true, {1}, json::array())).ok());
  const std::vector<uint64_t> prompt = {1, 2, 3};
  f.record_pending(std::vector<uint64_t>{2, 3}, 100);
  EXPECT_EQ(f.matched_chunks(prompt, 105), 3u);
  EXPECT_EQ(f.matched_chunks(prompt, 105, /*include_pending=*/false), 1u);
  EXPECT_EQ(f.matched_chunks(prompt, 111), 1u);  // expired
  f.record_pending(std::vector<uint64_t>{2, 3}, 200);
  ASSERT_TRUE(f.apply(reply(false, {}, json::array({json::array({3, kNone})}))).ok());
  EXPECT_EQ(f.matched_chunks(prompt, 201), 2u);  // the instance dropped 3 (or never kept it)
  ASSERT_TRUE(f.apply(reply(false, {}, json::array({json::array({2, kWhole})}))).ok());
  EXPECT_EQ(f.matched_chunks(prompt, 1000), 2u);  // confirmed by an event: no TTL
}

TEST(CacheFollower, MalformedRepliesAreRefusedWhole) {
  CacheFollower f("http://127.0.0.1:1");
  ASSERT_TRUE(f.apply(reply(true, {5}, json::array())).ok());
  const std::vector<json> bad = {
      json::array(),
      json{{"epoch", 7}},
      json{{"epoch", 7}, {"next", 1}, {"snapshot", true}, {"events", json::array()}, {"chunk_tokens", 32}, {"sliding_window", 0}},  // no "held"
      reply(false, {}, json::array({json::array({6, 3})})),        // no such hold
      reply(false, {}, json::array({json::array({6, true})})),     // the old boolean form
      reply(false, {}, json::array({json::array({6, kWhole}), json::array({"7", true})})),
      reply(false, {}, json::array({json::array({6})})),
      reply(false, {}, "events"),
      json{{"epoch", -1}, {"next", 1}, {"snapshot", false}, {"events", json::array()}, {"chunk_tokens", 32}},
      json{{"epoch", 7}, {"next", 1}, {"snapshot", false}, {"events", json::array()}, {"chunk_tokens", 32}},  // no window
      json{{"epoch", 7}, {"next", 1}, {"snapshot", false}, {"events", json::array()}, {"chunk_tokens", 0}, {"sliding_window", 0}},
      json{{"epoch", 7}, {"next", 1}, {"snapshot", false}, {"events", json::array()}, {"chunk_tokens", 4294967297ull}, {"sliding_window", 0}},
  };
  for (const json& b : bad) EXPECT_FALSE(f.apply(b).ok()) << b.dump();
  // Nothing of them was applied: 6 (before the bad event) is not held, 5 still is.
  EXPECT_EQ(f.matched_chunks(std::vector<uint64_t>{5}, 0), 1u);
  EXPECT_EQ(f.matched_chunks(std::vector<uint64_t>{6}, 0), 0u);
}

// Random edits of valid replies (bytes flipped, inserted, deleted, truncated): applying whatever
// still parses never crashes, and a refused reply changes nothing.
TEST(CacheFollower, MutatedRepliesNeverCrashAndRefusedOnesChangeNothing) {
  CacheFollower f("http://127.0.0.1:1");
  const std::vector<std::string> seeds = {
      reply(true, {1, 2, 3}, json::array()).dump(),
      reply(false, {}, json::array({json::array({4, kWhole}), json::array({18446744073709551615ull, kNone})})).dump()};
  std::mt19937 rng(2026);
  int applied = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string text = seeds[rng() % seeds.size()];
    for (int e = 1 + static_cast<int>(rng() % 3); e > 0 && !text.empty(); --e) {
      const size_t at = rng() % text.size();
      switch (rng() % 4) {
        case 0: text[at] = "{}[],:\"-0123456789tfnx"[rng() % 23]; break;
        case 1: text.insert(at, 1, static_cast<char>(rng())); break;
        case 2: text.erase(at, 1 + rng() % 6); break;
        default: text.resize(at); break;
      }
    }
    const json parsed = json::parse(text, nullptr, /*allow_exceptions=*/false);
    const size_t before = f.held_chunks();
    if (f.apply(parsed).ok()) {
      ++applied;
    } else {
      EXPECT_EQ(f.held_chunks(), before) << text;
    }
  }
  EXPECT_GT(applied, 0);
}

}  // namespace
}  // namespace mnemo::router

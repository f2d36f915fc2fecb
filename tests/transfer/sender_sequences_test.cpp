// The replay table of signed KV transfers (per sender, a window of accepted sequence numbers) and
// the rate-limited log of refusals.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "transfer/refusal_log.h"
#include "transfer/sender_sequences.h"

namespace mnemo::transfer {
namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// ---- replay protection ----------------------------------------------------------------------

TEST(SenderSequences, AcceptsIncreasingSequencesWithGaps) {
  SenderSequences table;
  EXPECT_TRUE(table.accept(1, 1).ok());
  EXPECT_TRUE(table.accept(1, 2).ok());
  EXPECT_TRUE(table.accept(1, 10).ok());  // 3..9 went elsewhere, or were dropped
  EXPECT_EQ(table.size(), 1u);
}

TEST(SenderSequences, RefusesAReplay) {
  SenderSequences table;
  ASSERT_TRUE(table.accept(1, 5).ok());
  const Status replay = table.accept(1, 5);
  ASSERT_FALSE(replay.ok());
  EXPECT_TRUE(contains(replay.error().message(), "accepted before (a replay)")) << replay.error().message();
  EXPECT_FALSE(table.accept(2, 0).ok());  // 0 is never a sequence
  EXPECT_TRUE(table.accept(1, 6).ok());   // a refusal changed nothing
}

// UCX may deliver a connection's messages out of order: a late one within the window is taken,
// once; one older than the window is refused.
TEST(SenderSequences, TakesALateSequenceWithinTheWindowOnce) {
  SenderSequences table(16, 4);
  ASSERT_TRUE(table.accept(1, 4).ok());
  EXPECT_TRUE(table.accept(1, 1).ok());   // late: 3 below
  EXPECT_TRUE(table.accept(1, 3).ok());
  EXPECT_FALSE(table.accept(1, 1).ok());  // twice
  EXPECT_FALSE(table.accept(1, 4).ok());
  ASSERT_TRUE(table.accept(1, 9).ok());
  EXPECT_TRUE(table.accept(1, 6).ok());  // 3 below 9, never seen
  const Status old = table.accept(1, 5);  // 4 below: outside the window, whether seen or not
  ASSERT_FALSE(old.ok());
  EXPECT_TRUE(contains(old.error().message(), "beyond the replay window of 4")) << old.error().message();
  // A jump of more than the window forgets the bits, and still refuses what is now too old.
  ASSERT_TRUE(table.accept(1, 5000).ok());
  EXPECT_FALSE(table.accept(1, 9).ok());
  EXPECT_TRUE(table.accept(1, 4999).ok());
}

TEST(SenderSequences, WindowZeroRefusesEverySequenceGoingBackwards) {
  SenderSequences table(16, 0);
  ASSERT_TRUE(table.accept(1, 5).ok());
  EXPECT_FALSE(table.accept(1, 4).ok());
  EXPECT_FALSE(table.accept(1, 5).ok());
  EXPECT_TRUE(table.accept(1, 7).ok());
}

TEST(SenderSequences, SendersAreIndependent) {
  SenderSequences table(16, 0);
  ASSERT_TRUE(table.accept(1, 100).ok());
  EXPECT_TRUE(table.accept(2, 1).ok());
  EXPECT_FALSE(table.accept(1, 99).ok());
  EXPECT_TRUE(table.accept(2, 2).ok());
}

TEST(SenderSequences, ForgetsTheLeastRecentSenderBeyondItsBound) {
  SenderSequences table(3);
  ASSERT_TRUE(table.accept(1, 1).ok());
  ASSERT_TRUE(table.accept(2, 1).ok());
  ASSERT_TRUE(table.accept(3, 1).ok());
  ASSERT_TRUE(table.accept(1, 2).ok());  // 1 is now the most recent; 2 the least
  ASSERT_TRUE(table.accept(4, 1).ok());
  EXPECT_EQ(table.size(), 3u);
  EXPECT_EQ(table.forgotten(), 1u);
  EXPECT_FALSE(table.accept(1, 2).ok());  // still known
  EXPECT_FALSE(table.accept(3, 1).ok());
  EXPECT_TRUE(table.accept(2, 1).ok());   // forgotten (the price of the bound)
}

// ---- the refusal log ------------------------------------------------------------------------

TEST(RefusalLog, FirstOfEachKindAtOnceThenOncePerInterval) {
  RefusalLog log(2, std::chrono::seconds(60));
  const auto t0 = RefusalLog::Clock::time_point{} + std::chrono::hours(1);
  EXPECT_EQ(log.line(0, "bad MAC", t0).value_or(""), "bad MAC");
  EXPECT_FALSE(log.line(0, "bad MAC", t0 + std::chrono::seconds(1)).has_value());
  EXPECT_FALSE(log.line(0, "bad MAC", t0 + std::chrono::seconds(59)).has_value());
  EXPECT_EQ(log.line(1, "replayed", t0 + std::chrono::seconds(2)).value_or(""), "replayed");  // its own kind
  const auto later = log.line(0, "bad MAC", t0 + std::chrono::seconds(60));
  ASSERT_TRUE(later.has_value());
  EXPECT_TRUE(contains(*later, "2 more of this kind not logged")) << *later;
  EXPECT_FALSE(log.line(0, "bad MAC", t0 + std::chrono::seconds(61)).has_value());
  EXPECT_FALSE(log.line(7, "no such kind", t0).has_value());
}

}  // namespace
}  // namespace mnemo::transfer

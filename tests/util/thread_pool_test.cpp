#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "util/result.h"
#include "util/thread_pool.h"

namespace mnemo {
namespace {

TEST(ThreadPool, ParallelForCoversEveryIndexOnce) {
  ThreadPool pool(3);
  for (int64_t n : {0, 1, 2, 3, 7, 1000}) {
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
    pool.parallel_for(n, [&](int64_t begin, int64_t end, int) {
      for (int64_t i = begin; i < end; ++i) hits[static_cast<size_t>(i)]++;
    });
    for (const auto& h : hits) EXPECT_EQ(h.load(), 1);
  }
}

TEST(ThreadPool, ChunkedLoopsCoverEveryIndexOnce) {
  ThreadPool pool(3);
  for (int64_t n : {0, 1, 2, 5, 64, 1000, 4099}) {
    for (int64_t chunk : {1, 3, 100}) {
      std::vector<std::atomic<int>> chunked(static_cast<size_t>(n)), shared(static_cast<size_t>(n));
      pool.parallel_chunks(n, chunk, [&](int64_t begin, int64_t end, int) {
        EXPECT_LE(end - begin, chunk);
        for (int64_t i = begin; i < end; ++i) chunked[static_cast<size_t>(i)]++;
      });
      pool.parallel_shares(n, chunk, [&](int64_t begin, int64_t end, int64_t stream_end, int) {
        EXPECT_LE(end - begin, chunk);
        EXPECT_LT(begin, end);
        EXPECT_GE(stream_end, end);
        EXPECT_LE(stream_end, n);
        for (int64_t i = begin; i < end; ++i) shared[static_cast<size_t>(i)]++;
      });
      for (const auto& h : chunked) ASSERT_EQ(h.load(), 1);
      for (const auto& h : shared) ASSERT_EQ(h.load(), 1);
    }
  }
}

// Each thread takes its own share front to back, told where the share then ends; a thread that is
// held up loses the back of its share to the others.
TEST(ThreadPool, SharesAreStreamedByTheirOwnersAndStolenFromTheBack) {
  ThreadPool pool(2);
  constexpr int64_t kN = 100, kGrain = 5;
  struct Piece {
    int64_t begin, end, stream_end;
  };
  std::vector<Piece> pieces[2];
  pool.parallel_shares(kN, kGrain, [&](int64_t begin, int64_t end, int64_t stream_end, int t) {
    // Thread 0 owns [0, 50); its first piece takes long enough for thread 1 to finish its own
    // share and come for the rest of thread 0's.
    if (t == 0 && begin == 0) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    pieces[t].push_back({begin, end, stream_end});
  });
  ASSERT_FALSE(pieces[0].empty());
  EXPECT_EQ(pieces[0].front().begin, 0);
  EXPECT_EQ(pieces[0].front().stream_end, 50);  // the share's end when the piece was taken
  for (size_t i = 1; i < pieces[0].size(); ++i) EXPECT_EQ(pieces[0][i].begin, pieces[0][i - 1].end);
  // Thread 1: its share [50, 100) front to back, then pieces of thread 0's from the back.
  std::vector<Piece>& other = pieces[1];
  ASSERT_GE(other.size(), 11u);
  for (size_t i = 0; i < 10; ++i) {
    EXPECT_EQ(other[i].begin, 50 + 5 * static_cast<int64_t>(i));
    EXPECT_EQ(other[i].stream_end, 100);
  }
  EXPECT_EQ(other[10].end, 50);  // stolen: the back of thread 0's share, nothing to stream on to
  EXPECT_EQ(other[10].stream_end, 50);
  for (size_t i = 11; i < other.size(); ++i) EXPECT_EQ(other[i].end, other[i - 1].begin);
  EXPECT_EQ(pieces[0].back().end, other.back().begin);  // met in the middle
}

TEST(ThreadPool, ManyShortJobsInARow) {
  // Back-to-back jobs (the workers are still polling) and jobs after a pause (asleep).
  ThreadPool pool(2);
  std::atomic<int64_t> total{0};
  for (int round = 0; round < 2000; ++round) {
    pool.parallel_for(2, [&](int64_t begin, int64_t end, int) { total += end - begin; });
    if (round % 500 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  EXPECT_EQ(total.load(), 4000);
}

TEST(ThreadPool, RunsOnEveryThreadAndIsReusable) {
  ThreadPool pool(4);
  for (int round = 0; round < 100; ++round) {
    std::vector<std::atomic<int>> seen(4);
    pool.run_on_all([&](int t) { seen[static_cast<size_t>(t)]++; });
    for (const auto& s : seen) EXPECT_EQ(s.load(), 1);
  }
}

TEST(Result, CarriesValuesAndErrorsWithContext) {
  const auto parse = [](int x) -> Result<int> {
    if (x < 0) return make_error("negative value {}", x);
    return x * 2;
  };
  const auto outer = [&](int x) -> Result<int> {
    MNEMO_ASSIGN_OR_RETURN(int doubled, parse(x));
    return doubled + 1;
  };
  EXPECT_EQ(*outer(3), 7);
  const Result<int> failed = outer(-2);
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.error().message(), "negative value -2");
  EXPECT_EQ(failed.error().with_context("input.txt").message(), "input.txt: negative value -2");
}

}  // namespace
}  // namespace mnemo

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
// held up loses the back of its share to the others. (Thread 0 holds its first piece until
// thread 1 has come for the rest of its share, so the outcome does not depend on timing.)
TEST(ThreadPool, SharesAreStreamedByTheirOwnersAndStolenFromTheBack) {
  ThreadPool pool(2);
  constexpr int64_t kN = 100, kGrain = 5, kHalf = 50;
  struct Piece {
    int64_t begin, end, stream_end;
  };
  std::vector<Piece> pieces[2];
  std::atomic<bool> stolen{false};
  pool.parallel_shares(kN, kGrain, [&](int64_t begin, int64_t end, int64_t stream_end, int t) {
    pieces[t].push_back({begin, end, stream_end});
    if (t == 1 && begin < kHalf) stolen = true;
    if (t == 0 && pieces[0].size() == 1) {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      while (!stolen && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  ASSERT_TRUE(stolen);
  // Thread 1: its share [50, 100) front to back, each piece told the share runs to 100...
  const std::vector<Piece>& other = pieces[1];
  ASSERT_GE(other.size(), 11u);
  for (size_t i = 0; i < 10; ++i) {
    EXPECT_EQ(other[i].begin, kHalf + kGrain * static_cast<int64_t>(i));
    EXPECT_EQ(other[i].end, other[i].begin + kGrain);
    EXPECT_EQ(other[i].stream_end, kN);
  }
  // ...then pieces of thread 0's from the back, with nothing to stream on to.
  EXPECT_EQ(other[10].end, kHalf);
  for (size_t i = 10; i < other.size(); ++i) {
    EXPECT_EQ(other[i].stream_end, other[i].end);
    if (i > 10) {
      EXPECT_EQ(other[i].end, other[i - 1].begin);
    }
  }
  // Thread 0: its share from the front, told it runs to 50 when it took its first piece.
  const std::vector<Piece>& own = pieces[0];
  if (own.empty()) {
    EXPECT_EQ(other.back().begin, 0);  // thread 1 took all of it
  } else {
    EXPECT_EQ(own.front().begin, 0);
    EXPECT_EQ(own.front().stream_end, kHalf);
    for (size_t i = 1; i < own.size(); ++i) EXPECT_EQ(own[i].begin, own[i - 1].end);
    EXPECT_EQ(own.back().end, other.back().begin);  // met in the middle
  }
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
  EXPECT_EQ(failed.error().code(), ErrorCode::kInvalidArgument);  // the default
}

TEST(Result, ErrorsKeepTheirCodeAsContextIsAdded) {
  const auto open_store = []() -> Status { return make_error(ErrorCode::kCorruption, "page {} fails its checksum", 7); };
  const auto serve = [&]() -> Status {
    MNEMO_RETURN_IF_ERROR(open_store());
    return ok_status();
  };
  const Status failed = serve();
  ASSERT_FALSE(failed.ok());
  const Error with_context = failed.error().with_context("responses.db");
  EXPECT_EQ(with_context.code(), ErrorCode::kCorruption);
  EXPECT_EQ(with_context.message(), "responses.db: page 7 fails its checksum");
  EXPECT_EQ(error_code_name(with_context.code()), "corruption");
  EXPECT_EQ(error_code_name(ErrorCode::kUnavailable), "unavailable");
}

}  // namespace
}  // namespace mnemo

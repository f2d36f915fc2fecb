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
      std::vector<std::atomic<int>> chunked(static_cast<size_t>(n)), guided(static_cast<size_t>(n));
      pool.parallel_chunks(n, chunk, [&](int64_t begin, int64_t end, int) {
        EXPECT_LE(end - begin, chunk);
        for (int64_t i = begin; i < end; ++i) chunked[static_cast<size_t>(i)]++;
      });
      pool.parallel_guided(n, chunk, [&](int64_t begin, int64_t end, int) {
        EXPECT_TRUE(end - begin >= chunk || end == n) << begin << ".." << end;
        for (int64_t i = begin; i < end; ++i) guided[static_cast<size_t>(i)]++;
      });
      for (const auto& h : chunked) ASSERT_EQ(h.load(), 1);
      for (const auto& h : guided) ASSERT_EQ(h.load(), 1);
    }
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
}

}  // namespace
}  // namespace mnemo

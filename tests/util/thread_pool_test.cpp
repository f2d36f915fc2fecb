#include <gtest/gtest.h>

#include <atomic>
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

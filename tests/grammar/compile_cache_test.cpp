// CompileCache: a key compiles once, the least recently used key leaves first, and a failed
// compilation is not kept.
#include <gtest/gtest.h>

#include <string>

#include "grammar/compile_cache.h"

namespace mnemo::grammar {
namespace {

TEST(CompileCache, CompilesEachKeyOnceAndEvictsTheLeastRecentlyUsed) {
  CompileCache<int> cache(2);
  int compiled = 0;
  const auto compile = [&compiled](int value) {
    return [&compiled, value]() -> Result<int> {
      ++compiled;
      return value;
    };
  };
  EXPECT_EQ(**cache.get("a", compile(1)), 1);
  EXPECT_EQ(**cache.get("a", compile(99)), 1);  // kept: not compiled again
  EXPECT_EQ(compiled, 1);
  EXPECT_EQ(cache.hits(), 1u);
  EXPECT_EQ(**cache.get("b", compile(2)), 2);
  EXPECT_EQ(**cache.get("a", compile(99)), 1);  // "a" is now the most recent
  EXPECT_EQ(**cache.get("c", compile(3)), 3);   // "b" leaves
  EXPECT_EQ(compiled, 3);
  EXPECT_EQ(**cache.get("a", compile(99)), 1);
  EXPECT_EQ(**cache.get("b", compile(4)), 4);   // compiled again
  EXPECT_EQ(compiled, 4);
}

TEST(CompileCache, FailuresAreNotKept) {
  CompileCache<int> cache(4);
  int tries = 0;
  const auto failing = [&tries]() -> Result<int> {
    ++tries;
    return make_error("no");
  };
  EXPECT_FALSE(cache.get("x", failing).ok());
  EXPECT_FALSE(cache.get("x", failing).ok());
  EXPECT_EQ(tries, 2);
}

}  // namespace
}  // namespace mnemo::grammar

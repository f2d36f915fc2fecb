// Stop strings matched across token boundaries: partial matches are held back, not emitted.
#include <gtest/gtest.h>

#include "engine/stop_matcher.h"

namespace mnemo {
namespace {

TEST(StopMatcher, HoldsBackPartialMatchesAcrossPushes) {
  StopMatcher m({"END", "xyz"});
  EXPECT_EQ(m.push("hello E").text, "hello ");
  EXPECT_EQ(m.push("N").text, "");
  const auto out = m.push("Dtail");
  EXPECT_TRUE(out.stopped);
  EXPECT_EQ(out.text, "");
  StopMatcher n({"END"});
  EXPECT_EQ(n.push("EN").text, "");
  EXPECT_EQ(n.push("x").text, "ENx");
  EXPECT_EQ(n.push("abcE").text, "abc");
  EXPECT_EQ(n.flush(), "E");
  StopMatcher none({});
  EXPECT_EQ(none.push("anything").text, "anything");
}

}  // namespace
}  // namespace mnemo

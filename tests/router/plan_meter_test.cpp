// PlanMeter: the planner's Y, t and N from the generations a router relays, exactly: medians
// over a bounded window, unknowns left out.
#include <gtest/gtest.h>

#include "router/plan_meter.h"

namespace mnemo::router {
namespace {

TEST(PlanMeter, MediansOfTimesAndTheMeanOfTokens) {
  PlanMeter meter;
  EXPECT_EQ(meter.measured().requests, 0u);
  EXPECT_EQ(meter.measured().prompt_seconds, 0.0);
  meter.record(0.2, 1.2, 11);  // 1.0 s over 10 tokens after the first: 0.1 s each
  meter.record(0.4, 0.4, 1);   // one token: no time per token
  meter.record(0.3, 2.3, 5);   // 0.5 s each
  const PlanMeter::Measured m = meter.measured();
  EXPECT_EQ(m.requests, 3u);
  EXPECT_DOUBLE_EQ(m.prompt_seconds, 0.3);
  EXPECT_DOUBLE_EQ(m.token_seconds, (0.1 + 0.5) / 2);  // an even count: the mean of the middle two
  EXPECT_DOUBLE_EQ(m.tokens_generated, 17.0 / 3);
}

TEST(PlanMeter, UnknownsAreLeftOutAndTheWindowKeepsTheLatest) {
  PlanMeter meter(/*window=*/2);
  meter.record(-1, 3.0, 7);    // unstreamed: no first text, no time per token
  meter.record(0.5, 1.5, -1);  // tokens unknown
  PlanMeter::Measured m = meter.measured();
  EXPECT_DOUBLE_EQ(m.prompt_seconds, 0.5);
  EXPECT_DOUBLE_EQ(m.token_seconds, 0.0);
  EXPECT_DOUBLE_EQ(m.tokens_generated, 7.0);
  meter.record(0.1, 0.4, 4);  // pushes the first one out
  m = meter.measured();
  EXPECT_EQ(m.requests, 2u);
  EXPECT_DOUBLE_EQ(m.prompt_seconds, (0.1 + 0.5) / 2);
  EXPECT_DOUBLE_EQ(m.token_seconds, 0.1);
  EXPECT_DOUBLE_EQ(m.tokens_generated, 4.0);
}

}  // namespace
}  // namespace mnemo::router

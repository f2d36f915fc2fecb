// DejaVu's planner (SPEC D5) on hand-worked figures.
#include <gtest/gtest.h>

#include <cmath>

#include "router/planner.h"

namespace mnemo::router {
namespace {

TEST(Planner, SplitsWhenPromptsDominateAndStreamingIsCheap) {
  // Y = 2 s, t = 0.05 s: Y/t = 40. D = 4, m = 1.2: threshold 3 / (4 * 0.8 - 1) = 3 / 2.2 = 1.36.
  // N = 40: m Y = 2.4, N t = 2; D_p = 4 * 2.4 / 4.4 = 2.18, D_t = 4 * 2 / 4.4 = 1.82.
  const auto p = plan_cluster({2.0, 0.05, 40, 4, 1.2});
  ASSERT_TRUE(p.ok()) << p.error().message();
  EXPECT_TRUE(p->disaggregate);
  EXPECT_NEAR(p->ratio, 40, 1e-9);
  EXPECT_NEAR(p->threshold, 3 / 2.2, 1e-9);
  EXPECT_NEAR(p->prompt_machines, 4 * 2.4 / 4.4, 1e-9);
  EXPECT_NEAR(p->token_machines, 4 * 2.0 / 4.4, 1e-9);
  EXPECT_EQ(p->prompt_instances, 2);
  EXPECT_EQ(p->token_instances, 2);
}

TEST(Planner, KeepsColocatedBelowTheThresholdOrWhenStreamingCostsTooMuch) {
  // Y/t = 1 <= 3 / (4 * 0.8 - 1).
  auto p = plan_cluster({0.05, 0.05, 40, 4, 1.2});
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(p->disaggregate);
  EXPECT_EQ(p->token_instances, 4);
  EXPECT_EQ(p->prompt_instances, 0);
  // D (2 - m) <= 1: never, however long prompts are.
  p = plan_cluster({100, 0.01, 40, 2, 1.6});
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(p->disaggregate);
  EXPECT_TRUE(std::isinf(p->threshold));
  // One machine: nothing to split.
  p = plan_cluster({100, 0.01, 40, 1, 1.0});
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(p->disaggregate);
}

TEST(Planner, EveryMachineCountStaysWhole) {
  // D_p rounds to 0 or D: still one of each.
  auto p = plan_cluster({0.5, 0.001, 1, 3, 1.0});  // prompts dominate: D_p ~ 3
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE(p->disaggregate);
  EXPECT_EQ(p->prompt_instances, 2);
  EXPECT_EQ(p->token_instances, 1);
}

TEST(Planner, OutOfRangeFiguresAreRefused) {
  for (const PlanInputs& bad : {PlanInputs{0, 1, 1, 2, 1}, PlanInputs{1, -1, 1, 2, 1}, PlanInputs{1, 1, 0, 2, 1},
                                PlanInputs{1, 1, 1, 0, 1}, PlanInputs{1, 1, 1, 2, 2.0}, PlanInputs{1, 1, 1, 2, 0.9}}) {
    const auto p = plan_cluster(bad);
    EXPECT_FALSE(p.ok());
  }
}

}  // namespace
}  // namespace mnemo::router

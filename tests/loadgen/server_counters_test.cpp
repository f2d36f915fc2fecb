// Reading a Mnemo server's decode counters from its /metrics text, and what a run added.
#include <gtest/gtest.h>

#include "loadgen/server_counters.h"

namespace mnemo::loadgen {
namespace {

constexpr const char* kMetrics = R"(# HELP mnemo_generation_tokens_total Tokens generated.
# TYPE mnemo_generation_tokens_total counter
mnemo_generation_tokens_total 300
mnemo_decode_passes_total 200
# TYPE mnemo_spec_draft_tokens_total counter
mnemo_spec_draft_tokens_total{drafter="prompt_lookup"} 150
mnemo_spec_draft_tokens_total{drafter="suffix"} 50
mnemo_spec_accepted_tokens_total{drafter="prompt_lookup"} 90
mnemo_spec_accepted_tokens_total{drafter="suffix"} 10
mnemo_steps_total 180
)";

TEST(ServerCounters, ParsesTheDecodeCountersSummingDrafters) {
  const auto c = parse_server_counters(kMetrics);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->generation_tokens, 300);
  EXPECT_EQ(c->decode_passes, 200);
  EXPECT_EQ(c->drafted, 200);
  EXPECT_EQ(c->accepted, 100);
}

TEST(ServerCounters, AnotherServersMetricsHaveNone) {
  EXPECT_FALSE(parse_server_counters("llamacpp:tokens_predicted_total 12\n").has_value());
  EXPECT_FALSE(parse_server_counters("").has_value());
  EXPECT_FALSE(parse_server_counters("mnemo_decode_passes_total not-a-number\n").has_value());
}

TEST(ServerCounters, ARunsFiguresAreTheDifference) {
  const ServerCounters before{100, 100, 40, 20};
  const ServerCounters after{400, 250, 140, 80};
  const auto f = decode_figures(before, after);
  ASSERT_TRUE(f.has_value());
  EXPECT_DOUBLE_EQ(f->tokens_per_forward, 300.0 / 150.0);
  EXPECT_DOUBLE_EQ(f->drafted, 100);
  EXPECT_DOUBLE_EQ(f->acceptance, 0.6);
  EXPECT_FALSE(decode_figures(std::nullopt, after).has_value());
  EXPECT_FALSE(decode_figures(after, after).has_value());  // no pass in between
}

}  // namespace
}  // namespace mnemo::loadgen

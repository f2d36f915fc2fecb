// Think times and the run's schedule: gaps inferred from a hand-made Mooncake-style trace,
// the distributions' means, and a schedule that depends only on the seed.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "loadgen/load_runner.h"
#include "loadgen/mooncake_record.h"
#include "loadgen/think_time.h"

namespace mnemo::loadgen {
namespace {

TEST(MooncakeGaps, ConsecutiveTurnsAreFoundByTheirSharedPrefix) {
  const char* trace =
      R"({"timestamp": 0, "hash_ids": [0, 1, 2]})"
      "\n"
      R"({"timestamp": 1000, "hash_ids": [0, 5, 6]})"  // shares only the common first block: a new conversation
      "\n"
      R"({"timestamp": 10000, "hash_ids": [0, 1, 2, 3, 4]})"  // extends the first request: 10 s
      "\n"
      R"({"timestamp": 30000, "hash_ids": [0, 1, 2, 3, 7, 8]})"  // extends the previous but its partial last block: 20 s
      "\n"
      R"({"timestamp": 31000, "hash_ids": [0, 1, 2, 9]})"  // a second continuation of the first request: a branch
      "\n"
      R"({"timestamp": 40000, "hash_ids": [0, 5]})"  // one shared block is not enough
      "\n";
  const auto gaps = mooncake_turn_gaps_from_text(trace, "trace");
  ASSERT_TRUE(gaps.ok()) << gaps.error().message();
  EXPECT_EQ(*gaps, (std::vector<double>{10.0, 20.0}));
}

TEST(MooncakeGaps, MalformedLinesAreErrors) {
  const auto gaps = mooncake_turn_gaps_from_text("{\"timestamp\": 0}\n", "trace.jsonl");
  ASSERT_FALSE(gaps.ok());
  EXPECT_NE(gaps.error().message().find("trace.jsonl:1:"), std::string::npos);
  EXPECT_FALSE(mooncake_turn_gaps("/nonexistent/trace.jsonl").ok());
}

TEST(MooncakeRecord, ReadsTheTimestampIdsAndLengthsWhereGiven) {
  const auto full = parse_mooncake_record(R"({"timestamp": 1500, "input_length": 600, "output_length": 3, "hash_ids": [0, 7]})");
  ASSERT_TRUE(full.ok()) << full.error().message();
  EXPECT_DOUBLE_EQ(full->timestamp_ms, 1500);
  EXPECT_EQ(full->hash_ids, (std::vector<int64_t>{0, 7}));
  EXPECT_EQ(full->input_length, 600);
  EXPECT_EQ(full->output_length, 3);
  const auto bare = parse_mooncake_record(R"({"timestamp": 0, "hash_ids": []})");
  ASSERT_TRUE(bare.ok());
  EXPECT_FALSE(bare->input_length.has_value());
  EXPECT_FALSE(parse_mooncake_record(R"({"timestamp": 0, "hash_ids": [1.5]})").ok());
  EXPECT_FALSE(parse_mooncake_record(R"({"timestamp": 0, "hash_ids": [], "input_length": "600"})").ok());
  EXPECT_FALSE(parse_mooncake_record("[1]").ok());
}

TEST(ThinkTime, EmpiricalDrawsScaledGaps) {
  const ThinkTime think = ThinkTime::empirical({10.0, 20.0}, 0.5);
  EXPECT_DOUBLE_EQ(think.mean(), 7.5);
  std::mt19937_64 rng(1);
  for (int i = 0; i < 100; ++i) {
    const double t = think.sample(rng);
    EXPECT_TRUE(t == 5.0 || t == 10.0) << t;
  }
}

TEST(ThinkTime, ExponentialHasTheRequestedMean) {
  const ThinkTime think = ThinkTime::exponential(2.0);
  std::mt19937_64 rng(3);
  double sum = 0.0;
  constexpr int kSamples = 20000;
  for (int i = 0; i < kSamples; ++i) sum += think.sample(rng);
  EXPECT_NEAR(sum / kSamples, 2.0, 0.06);  // ~4 standard errors
  EXPECT_EQ(ThinkTime::exponential(0.0).sample(rng), 0.0);
}

std::vector<PlannedConversation> conversations(size_t n, size_t turns) {
  PlannedConversation c;
  c.turns.resize(turns);
  return std::vector<PlannedConversation>(n, c);
}

TEST(Schedule, PoissonArrivalsFromTimeZeroAndThinkTimesPerLaterTurn) {
  const auto workload = conversations(4000, 3);
  const Schedule schedule = make_schedule(workload, 0.5, ThinkTime::exponential(1.0), 42);
  ASSERT_EQ(schedule.arrival_s.size(), 4000u);
  EXPECT_EQ(schedule.arrival_s[0], 0.0);
  EXPECT_TRUE(std::is_sorted(schedule.arrival_s.begin(), schedule.arrival_s.end()));
  const double mean_gap = schedule.arrival_s.back() / 3999.0;
  EXPECT_NEAR(mean_gap, 2.0, 0.13);  // 1 / rate, ~4 standard errors
  ASSERT_EQ(schedule.think_s[0].size(), 2u);

  // The same seed gives the same schedule; another seed another one.
  const Schedule again = make_schedule(workload, 0.5, ThinkTime::exponential(1.0), 42);
  EXPECT_EQ(again.arrival_s, schedule.arrival_s);
  EXPECT_EQ(again.think_s, schedule.think_s);
  EXPECT_NE(make_schedule(workload, 0.5, ThinkTime::exponential(1.0), 43).arrival_s, schedule.arrival_s);
}

}  // namespace
}  // namespace mnemo::loadgen

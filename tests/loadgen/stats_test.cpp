// The summary statistics on hand-made records, with exact expected values.
#include <gtest/gtest.h>

#include "loadgen/stats.h"

namespace mnemo::loadgen {
namespace {

TEST(Percentile, InterpolatesBetweenClosestRanks) {
  EXPECT_DOUBLE_EQ(percentile({4, 1, 3, 2}, 50), 2.5);
  EXPECT_DOUBLE_EQ(percentile({4, 1, 3, 2}, 90), 3.7);  // rank 2.7: 3 + 0.7 * (4 - 3)
  EXPECT_DOUBLE_EQ(percentile({4, 1, 3, 2}, 0), 1.0);
  EXPECT_DOUBLE_EQ(percentile({4, 1, 3, 2}, 100), 4.0);
  EXPECT_DOUBLE_EQ(percentile({10, 20, 30, 40, 50}, 99), 49.6);  // rank 3.96
  EXPECT_DOUBLE_EQ(percentile({10, 20, 30, 40, 50}, 50), 30.0);
  EXPECT_DOUBLE_EQ(percentile({7}, 90), 7.0);
  EXPECT_DOUBLE_EQ(percentile({}, 50), 0.0);
}

TEST(Distribution, CountsAndMean) {
  const Distribution d = distribution_of({1, 2, 3, 4});
  EXPECT_EQ(d.count, 4);
  EXPECT_DOUBLE_EQ(d.mean, 2.5);
  EXPECT_DOUBLE_EQ(d.p50, 2.5);
  EXPECT_DOUBLE_EQ(d.p90, 3.7);
  EXPECT_DOUBLE_EQ(d.p99, 3.97);
}

RequestRecord record(int32_t turn, double sent, double first, double finished, int32_t completion, int32_t prompt,
                     int32_t cached) {
  RequestRecord r;
  r.turn = turn;
  r.scheduled_s = sent;
  r.sent_s = sent;
  r.first_token_s = first;
  r.finished_s = finished;
  r.completion_tokens = completion;
  r.prompt_tokens = prompt;
  r.cached_tokens = cached;
  r.ok = true;
  return r;
}

std::vector<RequestRecord> hand_made_run() {
  RequestRecord failed;
  failed.turn = 1;
  failed.scheduled_s = 3.0;
  failed.sent_s = 3.0;
  failed.finished_s = 4.0;
  failed.ok = false;
  return {
      record(0, 0.0, 0.5, 2.5, 5, 100, 0),  // TTFT 0.5, TPOT 2/4 = 0.5, E2E 2.5
      record(1, 1.0, 1.25, 2.25, 5, 200, 96),  // TTFT 0.25, TPOT 1/4 = 0.25, E2E 1.25
      record(0, 2.0, 4.0, 5.0, 1, 50, 0),  // TTFT 2, no TPOT (one token), E2E 3
      failed,
  };
}

TEST(RunSummary, ThroughputOverTheWindowFromStartToLastEnd) {
  const RunSummary s = summarize_run(hand_made_run(), 4, Slo{1.0, 0.4});
  EXPECT_DOUBLE_EQ(s.window_s, 5.0);
  EXPECT_EQ(s.requests_sent, 4);
  EXPECT_EQ(s.conversations, 2);
  EXPECT_EQ(s.requests_ok, 3);
  EXPECT_EQ(s.requests_failed, 1);
  EXPECT_EQ(s.output_tokens, 11);
  EXPECT_DOUBLE_EQ(s.request_throughput, 0.6);
  EXPECT_DOUBLE_EQ(s.output_throughput, 2.2);
  EXPECT_DOUBLE_EQ(s.max_client_queue_s, 0.0);
}

TEST(RunSummary, LatencyPercentilesPerGroup) {
  const RunSummary s = summarize_run(hand_made_run(), 4, Slo{});
  EXPECT_EQ(s.all.requests, 3);
  EXPECT_DOUBLE_EQ(s.all.ttft.p50, 0.5);
  EXPECT_DOUBLE_EQ(s.all.ttft.p90, 1.7);  // [0.25, 0.5, 2], rank 1.8: 0.5 + 0.8 * 1.5
  EXPECT_EQ(s.all.tpot.count, 2);         // the one-token reply has no TPOT
  EXPECT_DOUBLE_EQ(s.all.tpot.p50, 0.375);
  EXPECT_DOUBLE_EQ(s.all.e2e.p50, 2.5);
  EXPECT_DOUBLE_EQ(s.all.e2e.mean, (2.5 + 1.25 + 3.0) / 3);

  EXPECT_EQ(s.first_turns.requests, 2);
  EXPECT_DOUBLE_EQ(s.first_turns.ttft.p50, 1.25);
  EXPECT_DOUBLE_EQ(s.first_turns.ttft.p90, 1.85);
  EXPECT_EQ(s.later_turns.requests, 1);  // the failed turn counts nowhere
  EXPECT_DOUBLE_EQ(s.later_turns.ttft.p99, 0.25);
  EXPECT_DOUBLE_EQ(s.later_turns.tpot.p50, 0.25);

  EXPECT_EQ(s.all.prompt_tokens, 350);
  EXPECT_EQ(s.all.cached_tokens, 96);
  EXPECT_DOUBLE_EQ(s.later_turns.cached_share, 0.48);
  EXPECT_DOUBLE_EQ(s.first_turns.cached_share, 0.0);
}

TEST(RunSummary, GoodputCountsRequestsWithinBothBounds) {
  // TTFT <= 1 and TPOT <= 0.4: only the second record (the first's TPOT is 0.5, the third's
  // TTFT is 2).
  const RunSummary s = summarize_run(hand_made_run(), 4, Slo{1.0, 0.4});
  EXPECT_EQ(s.requests_meeting_slo, 1);
  EXPECT_DOUBLE_EQ(s.goodput, 0.2);
  EXPECT_FALSE(s.slo_met);

  // A one-token reply meets any TPOT bound; without bounds every successful request counts.
  EXPECT_EQ(summarize_run(hand_made_run(), 4, Slo{2.0, 0.25}).requests_meeting_slo, 2);
  EXPECT_EQ(summarize_run(hand_made_run(), 4, Slo{}).requests_meeting_slo, 3);
}

TEST(RunSummary, SloMetNeedsP90sWithinBoundsAndEveryTurnServed) {
  std::vector<RequestRecord> records = hand_made_run();
  records.pop_back();  // no failure now
  EXPECT_TRUE(summarize_run(records, 3, Slo{2.0, 0.5}).slo_met);    // p90 TTFT 1.7, p90 TPOT 0.475
  EXPECT_FALSE(summarize_run(records, 3, Slo{1.6, 0.5}).slo_met);   // TTFT p90 above
  EXPECT_FALSE(summarize_run(records, 3, Slo{2.0, 0.45}).slo_met);  // TPOT p90 above
  EXPECT_FALSE(summarize_run(records, 4, Slo{2.0, 0.5}).slo_met);   // a planned turn never sent
  EXPECT_TRUE(summarize_run(records, 3, Slo{}).slo_met);
  EXPECT_FALSE(summarize_run({}, 0, Slo{}).slo_met);  // nothing measured, nothing met
}

TEST(RunSummary, RecordsHowLongTheInFlightCapHeldRequests) {
  std::vector<RequestRecord> records = hand_made_run();
  records[1].scheduled_s = 0.75;  // due at 0.75, sent at 1.0
  EXPECT_DOUBLE_EQ(summarize_run(records, 4, Slo{}).max_client_queue_s, 0.25);
}

}  // namespace
}  // namespace mnemo::loadgen

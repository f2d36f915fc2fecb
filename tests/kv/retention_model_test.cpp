// RetentionModel: its bins and classes, the prior (least-recently-used order, exact values), the
// fit on hand-countable observations (exact return probabilities and hazards), censoring of
// drops and of chunks still idle, the refresh interval and the horizon, the significance gate
// (classes alike keep the pooled p exactly, classes that differ split), and properties on random
// events (the index never rises with idle time; the same events give the same values).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "kv/retention_model.h"

namespace mnemo {
namespace {

ChunkFacts facts(double last_use, int32_t end_chunks = 1) {
  ChunkFacts c;
  c.last_use = last_use;
  c.chunk_tokens = 32;
  c.end_chunks = end_chunks;
  c.bytes = 32;  // one token per byte: value() is the index itself
  return c;
}

// Relative closeness, for values that span many orders of magnitude.
void expect_close(double actual, double expected, const char* what) {
  EXPECT_NEAR(actual / expected, 1.0, 1e-9) << what << ": " << actual << " vs " << expected;
}

TEST(RetentionModel, IdleBinsAreHalfOctavesFromOneSecond) {
  const RetentionModel m;
  EXPECT_EQ(m.bin_of(0), 0);
  EXPECT_EQ(m.bin_of(0.5), 0);
  EXPECT_EQ(m.bin_of(-3), 0);
  EXPECT_EQ(m.bin_of(std::numeric_limits<double>::quiet_NaN()), 0);
  EXPECT_EQ(m.bin_of(1), 1);
  EXPECT_EQ(m.bin_of(1.4), 1);   // [1, sqrt 2)
  EXPECT_EQ(m.bin_of(1.5), 2);   // [sqrt 2, 2)
  EXPECT_EQ(m.bin_of(2), 3);
  EXPECT_EQ(m.bin_of(3), 4);     // [2 sqrt 2, 4)
  EXPECT_EQ(m.bin_of(4), 5);
  EXPECT_EQ(m.bin_of(32767), 30);
  EXPECT_EQ(m.bin_of(32768), 31);  // the open last bin
  EXPECT_EQ(m.bin_of(1e12), 31);
  EXPECT_DOUBLE_EQ(m.bin_start(0), 0);
  EXPECT_DOUBLE_EQ(m.bin_start(1), 1);
  EXPECT_DOUBLE_EQ(m.bin_start(5), 4);
  EXPECT_DOUBLE_EQ(m.bin_start(31), 32768);
  for (int32_t b = 1; b < 31; ++b) {
    EXPECT_EQ(m.bin_of(m.bin_start(b)), b);
    EXPECT_EQ(m.bin_of(std::nextafter(m.bin_start(b + 1), 0.0)), b);
  }
}

TEST(RetentionModel, ClassesAreHalfOctavesOfTheConversationLength) {
  const RetentionModel m;
  EXPECT_EQ(m.class_of(0), 0);
  EXPECT_EQ(m.class_of(1), 0);
  EXPECT_EQ(m.class_of(2), 2);
  EXPECT_EQ(m.class_of(3), 3);    // 2 log2 3 = 3.17
  EXPECT_EQ(m.class_of(4), 4);
  EXPECT_EQ(m.class_of(63), 11);  // 11.95
  EXPECT_EQ(m.class_of(64), 12);
  EXPECT_EQ(m.class_of(90), 12);  // 12.98
  EXPECT_EQ(m.class_of(91), 13);  // 13.02
  EXPECT_EQ(m.class_of(std::numeric_limits<int32_t>::max()), 47);
}

// No observation: every class comes back with probability 1/2 after an exponential think time of
// 120 s, so P(alive | a) = 1 / (1 + e^(a/120)). With one hazard the best horizon is the shortest
// (the ratio of returns to occupancy only falls as the dead weight accumulates), so the value is
// P(alive) / 120 per token per byte, whatever the class: the order is least-recently-used.
TEST(RetentionModel, WithoutObservationsTheValueIsThePriorsReturnRate) {
  const RetentionModel m;
  EXPECT_DOUBLE_EQ(m.pooled_return_probability(), 0.5);
  for (const int32_t c : {0, 7, 47}) EXPECT_DOUBLE_EQ(m.return_probability(c), 0.5);
  for (const int32_t b : {0, 9, 31}) EXPECT_DOUBLE_EQ(m.hazard(b), 1.0 / 120);
  const auto expected = [](double a) { return 1 / (1 + std::exp(a / 120)) / 120; };
  // At bin starts the table is exact; past the last one the open bin is exact everywhere.
  for (const double a : {0.0, 1.0, 2.0, 64.0, 1024.0, 32768.0, 40000.0}) {
    const double now = 1000 + a;
    expect_close(m.value(facts(1000), now), expected(a), "value");
    expect_close(m.value(facts(1000, 500), now), expected(a), "value of a long conversation");
    expect_close(m.alive_probability(m.class_of(1), a), 1 / (1 + std::exp(a / 120)), "P(alive)");
  }
  double previous = std::numeric_limits<double>::infinity();
  for (double a = 0; a < 1e6; a = a * 1.07 + 0.01) {
    const double v = m.log_value(facts(0), a);
    EXPECT_LT(v, previous) << "idle " << a;
    previous = v;
  }
}

TEST(RetentionModel, ValueIsPerBytePerTokenAndZeroForAnEndedConversation) {
  const RetentionModel m;
  ChunkFacts c = facts(0);
  const double base = m.value(c, 30);
  c.bytes = 16;  // a compact copy: half the bytes
  expect_close(m.value(c, 30), 2 * base, "half the bytes");
  c.chunk_tokens = 64;
  expect_close(m.value(c, 30), 4 * base, "twice the tokens too");
  c.ended = true;
  EXPECT_EQ(m.value(c, 30), 0);
  EXPECT_EQ(m.log_value(c, 30), -std::numeric_limits<double>::infinity());
}

// 96 one-chunk conversations, each back 0.5 s after it went idle, and nothing censored: the fit
// is one M step.
//   pooled p = (96 + 4 x 0.5) / (96 + 4) = 0.98
//   hazard of bin 0 ([0, 1 s), width 1): (96 returns + 2 x 1 / 120) / (96 x 0.5 s + 2 x 1 s)
//   later bins: only the prior, 1 / 120.
// All the data are in class 0, so nothing says it differs from the pooled traffic: every class
// keeps the pooled p. Without the significance gate (class_split_statistic 0) the classes shrink
// to it:
//   class 0:   (96 + 4 x 0.98) / (96 + 4) = 0.9992
//   class 1 (borrows half of class 0): (48 + 3.92) / (48 + 4) = 51.92 / 52
//   class 5 (no data near): 0.98
TEST(RetentionModel, ReturnsAloneGiveTheShrunkProbabilitiesAndHazardsExactly) {
  RetentionOptions ungated;
  ungated.class_split_statistic = 0;
  RetentionModel m;
  RetentionModel u(ungated);
  for (int i = 0; i < 96; ++i) {
    m.observe_return(facts(1000 + i - 0.5), 1000 + i);
    u.observe_return(facts(1000 + i - 0.5), 1000 + i);
  }
  m.refresh(1100);
  u.refresh(1100);
  for (const RetentionModel* x : {&m, &u}) {
    EXPECT_DOUBLE_EQ(x->observed_conversations(), 96);
    EXPECT_DOUBLE_EQ(x->pooled_return_probability(), 0.98);
    EXPECT_DOUBLE_EQ(x->hazard(0), (96 + 2.0 / 120) / (48 + 2));
    EXPECT_DOUBLE_EQ(x->hazard(1), 1.0 / 120);
    EXPECT_DOUBLE_EQ(x->hazard(20), 1.0 / 120);
  }
  for (const int32_t c : {0, 1, 5}) EXPECT_EQ(m.return_probability(c), m.pooled_return_probability()) << c;
  EXPECT_DOUBLE_EQ(u.return_probability(0), 0.9992);
  EXPECT_DOUBLE_EQ(u.return_probability(1), 51.92 / 52);
  EXPECT_DOUBLE_EQ(u.return_probability(5), 0.98);
}

// A conversation counts once whatever its length: four chunks of a four-chunk conversation weigh
// one. Its return takes it off the pending list.
TEST(RetentionModel, AReturnResolvesThePendingChunksOfItsConversation) {
  RetentionModel m;
  m.observe_insert(facts(0, 4), 0, 4);
  EXPECT_EQ(m.pending_groups(), 1u);
  EXPECT_DOUBLE_EQ(m.observed_conversations(), 0);
  m.observe_return(facts(0, 4), 50, 3);
  EXPECT_EQ(m.pending_groups(), 1u);  // one chunk still idle
  m.observe_return(facts(0, 4), 50, 1);
  EXPECT_EQ(m.pending_groups(), 0u);
  EXPECT_DOUBLE_EQ(m.observed_conversations(), 1);
}

// One conversation goes idle at 0 and is still idle at 1000 s: censored there, it is almost
// surely not coming back (S(1000) = e^(-1000/120)), so the pooled p falls from 1/2 to about
// (0 + 2) / (1 + 4) = 0.4; one conversation is no evidence that its class differs, so the class
// has the pooled p. Past the horizon (a day) it is censored for good and leaves the pending list.
TEST(RetentionModel, ChunksStillIdleAreCensoredAtRefreshAndExpireAtTheHorizon) {
  RetentionModel m;
  m.observe_insert(facts(0), 0);
  EXPECT_DOUBLE_EQ(m.return_probability(0), 0.5);  // censored at 0 s: no news
  m.refresh(1000);
  EXPECT_NEAR(m.pooled_return_probability(), 0.4, 1e-3);
  EXPECT_EQ(m.return_probability(0), m.pooled_return_probability());
  EXPECT_DOUBLE_EQ(m.observed_conversations(), 0);
  EXPECT_EQ(m.pending_groups(), 1u);
  m.refresh(86401);
  EXPECT_EQ(m.pending_groups(), 0u);
  EXPECT_DOUBLE_EQ(m.observed_conversations(), 1);
  EXPECT_NEAR(m.pooled_return_probability(), 0.4, 1e-3);
  EXPECT_EQ(m.return_probability(0), m.pooled_return_probability());
}

// The fit is redone when an event comes 10 s or more after the last fit (the first event fits).
TEST(RetentionModel, RefitsOnlyEveryRefreshInterval) {
  RetentionModel m;
  m.observe_return(facts(-5), 0);
  EXPECT_DOUBLE_EQ(m.pooled_return_probability(), 3.0 / 5);  // (1 + 2) / (1 + 4)
  m.observe_return(facts(0), 5);
  EXPECT_DOUBLE_EQ(m.pooled_return_probability(), 3.0 / 5);
  m.observe_return(facts(5), 10);
  EXPECT_DOUBLE_EQ(m.pooled_return_probability(), 5.0 / 7);  // (3 + 2) / (3 + 4)
}

// Short conversations come back within a minute; long ones are dropped unmatched after an hour.
// The long class is then worth less even when idle for far less time.
TEST(RetentionModel, LearnsWhichConversationsComeBack) {
  RetentionModel m;
  // Every 100 s a 2-chunk and a 64-chunk conversation go idle; the short one is back 30 s later,
  // the long one is dropped unmatched after an hour. Events in time order.
  struct Event {
    double time;
    int kind;  // 0 insert, 1 return, 2 drop
    double last_use;
    int32_t length;
  };
  std::vector<Event> events;
  double now = 0;
  for (int i = 0; i < 40; ++i) {
    now += 100;
    events.push_back({now, 0, now, 2});
    events.push_back({now, 0, now, 64});
    events.push_back({now + 30, 1, now, 2});
    events.push_back({now + 3600, 2, now, 64});
  }
  std::stable_sort(events.begin(), events.end(), [](const Event& x, const Event& y) { return x.time < y.time; });
  for (const Event& e : events) {
    const ChunkFacts c = facts(e.last_use, e.length);
    if (e.kind == 0) m.observe_insert(c, e.time, e.length);
    if (e.kind == 1) m.observe_return(c, e.time, e.length);
    if (e.kind == 2) m.observe_drop(c, e.time, e.length);
  }
  m.refresh(now + 3600);
  const int32_t short_class = m.class_of(2);
  const int32_t long_class = m.class_of(64);
  EXPECT_GT(m.return_probability(short_class), 0.85);
  EXPECT_LT(m.return_probability(long_class), 0.15);
  const double t = now + 5000;
  EXPECT_LT(m.value(facts(t - 10, 64), t), m.value(facts(t - 100, 2), t));
  // Within a class the order stays least-recently-used.
  EXPECT_LT(m.value(facts(t - 100, 64), t), m.value(facts(t - 10, 64), t));
  EXPECT_LT(m.value(facts(t - 1000, 2), t), m.value(facts(t - 100, 2), t));
}

// 2,000 one-turn conversations of random lengths (1 to 300 chunks, log-uniform: every class from
// 0 to 16 gets some), one every 20 s on average, each back after an exponential think time of
// 60 s with probability `p(length)`, else dropped unmatched after an hour. Events in time order.
// Refits every 200 s (sooner only costs time here).
RetentionOptions every_200_s(double class_split_statistic = RetentionOptions{}.class_split_statistic) {
  RetentionOptions o;
  o.refresh_interval_s = 200;
  o.class_split_statistic = class_split_statistic;
  return o;
}

template <typename P>
void replay_random_conversations(RetentionModel& m, P p, uint64_t seed) {
  struct Event {
    double time;
    int kind;  // 0 insert, 1 return, 2 drop
    double last_use;
    int32_t length;
  };
  std::mt19937_64 rng(seed);
  std::vector<Event> events;
  double now = 0;
  for (int i = 0; i < 2000; ++i) {
    now += std::exponential_distribution<double>(1.0 / 20)(rng);
    const auto length = static_cast<int32_t>(std::exp(std::uniform_real_distribution<double>(0, std::log(300.0))(rng)));
    events.push_back({now, 0, now, length});
    if (std::uniform_real_distribution<double>(0, 1)(rng) < p(length)) {
      events.push_back({now + std::exponential_distribution<double>(1.0 / 60)(rng), 1, now, length});
    } else {
      events.push_back({now + 3600, 2, now, length});
    }
  }
  std::stable_sort(events.begin(), events.end(), [](const Event& x, const Event& y) { return x.time < y.time; });
  for (const Event& e : events) {
    const ChunkFacts c = facts(e.last_use, e.length);
    if (e.kind == 0) m.observe_insert(c, e.time, e.length);
    if (e.kind == 1) m.observe_return(c, e.time, e.length);
    if (e.kind == 2) m.observe_drop(c, e.time, e.length);
  }
  m.refresh(now + 3600);
}

// Every class comes back alike (p 0.6): the chance differences between classes are not evidence,
// so every class has exactly the pooled p and the order is least-recently-used whatever the
// lengths. Without the gate the same data part the classes.
TEST(RetentionModel, ClassesThatComeBackAlikeKeepThePooledProbabilityAndTheLruOrder) {
  for (const uint64_t seed : {1, 2, 3}) {
    RetentionModel m(every_200_s());
    RetentionModel u(every_200_s(0));
    replay_random_conversations(m, [](int32_t) { return 0.6; }, seed);
    replay_random_conversations(u, [](int32_t) { return 0.6; }, seed);
    EXPECT_NEAR(m.pooled_return_probability(), 0.6, 0.05) << seed;
    double spread = 0;
    for (int32_t cls = 0; cls < m.options().classes; ++cls) {
      EXPECT_EQ(m.return_probability(cls), m.pooled_return_probability()) << seed << " " << cls;
      spread = std::max(spread, std::abs(u.return_probability(cls) - u.pooled_return_probability()));
    }
    EXPECT_GT(spread, 0.02) << seed;
    // Least-recently-used: the longer idle never worth more, and the same idle time worth the
    // same at every length.
    const double t = 1e5;
    const std::vector<int32_t> lengths = {1, 3, 10, 40, 150, 300, 5000};
    double previous = std::numeric_limits<double>::infinity();
    for (double idle = 0; idle < 1e5; idle = idle * 1.3 + 0.1) {
      const double v = m.log_value(facts(t - idle), t);
      EXPECT_LE(v, previous) << seed << " " << idle;
      for (const int32_t length : lengths) EXPECT_EQ(m.log_value(facts(t - idle, length), t), v) << seed << " " << idle;
      previous = v;
    }
  }
}

// Short conversations (up to 8 chunks) come back with p 0.85, longer ones with 0.3: the classes
// seen a few hundred times part from the pooled p as they did without the gate (one seen a few
// dozen times, such as 256-362 chunks here, may keep the pooled p).
TEST(RetentionModel, ClassesThatComeBackDifferentlySplit) {
  const auto p = [](int32_t length) { return length <= 8 ? 0.85 : 0.3; };
  for (const uint64_t seed : {1, 2, 3}) {
    RetentionModel m(every_200_s());
    RetentionModel u(every_200_s(0));
    replay_random_conversations(m, p, seed);
    replay_random_conversations(u, p, seed);
    const double pooled = m.pooled_return_probability();
    for (const int32_t length : {1, 2, 4}) {
      EXPECT_GT(m.return_probability(m.class_of(length)), 0.75) << seed << " " << length;
    }
    for (const int32_t length : {32, 64, 128}) {
      EXPECT_LT(m.return_probability(m.class_of(length)), 0.4) << seed << " " << length;
    }
    EXPECT_GT(pooled, 0.4) << seed;
    EXPECT_LT(pooled, 0.6) << seed;
    for (const int32_t length : {1, 2, 4, 32, 64, 128}) {
      const int32_t cls = m.class_of(length);
      EXPECT_NEAR(m.return_probability(cls), u.return_probability(cls), 0.01) << seed << " " << length;
    }
    // A long conversation idle for 10 s is worth less than a short one idle for 100 s.
    const double t = 1e5;
    EXPECT_LT(m.value(facts(t - 10, 64), t), m.value(facts(t - 100, 2), t)) << seed;
  }
}

TEST(RetentionModel, OnRandomEventsTheIndexNeverRisesWithIdleTimeAndReplaysExactly) {
  std::mt19937_64 rng(5);
  RetentionModel a;
  RetentionModel b;
  double now = 0;
  for (int i = 0; i < 1500; ++i) {
    now += std::exponential_distribution<double>(0.2)(rng);
    const auto length = static_cast<int32_t>(1 + rng() % 300);
    const double idle = std::exponential_distribution<double>(1.0 / (rng() % 2 ? 30 : 900))(rng);
    const ChunkFacts c = facts(now - idle, length);
    const auto chunks = static_cast<int32_t>(1 + rng() % 4);
    if (rng() % 3 == 0) {
      a.observe_drop(c, now, chunks);
      b.observe_drop(c, now, chunks);
    } else {
      a.observe_return(c, now, chunks);
      b.observe_return(c, now, chunks);
    }
    a.observe_insert(facts(now, length), now);
    b.observe_insert(facts(now, length), now);
  }
  for (int32_t cls = 0; cls < a.options().classes; ++cls) {
    EXPECT_GT(a.return_probability(cls), 0) << cls;
    EXPECT_LT(a.return_probability(cls), 1) << cls;
    for (int32_t bin = 1; bin < a.options().idle_bins; ++bin) {
      EXPECT_LE(a.log_index_at_bin_start(cls, bin), a.log_index_at_bin_start(cls, bin - 1)) << cls << " " << bin;
    }
  }
  for (const int32_t length : {1, 7, 64, 300}) {
    double previous = std::numeric_limits<double>::infinity();
    for (double idle = 0; idle < 1e6; idle = idle * 1.05 + 0.01) {
      const double v = a.log_value(facts(now - idle, length), now);
      EXPECT_LE(v, previous) << length << " " << idle;
      EXPECT_EQ(v, b.log_value(facts(now - idle, length), now));
      previous = v;
    }
  }
}

}  // namespace
}  // namespace mnemo

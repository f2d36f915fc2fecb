// The int8 peak probe (kernels/cpu/int8_peak.h): every ISA variant the CPU has does the work it
// claims, lane for lane (its checksum equals the plain-integer reference, including where the
// int32 lanes wrap), so the MAC rate `mnemo bench` reports counts instructions that really ran.
#include "kernels/cpu/int8_peak.h"

#include <gtest/gtest.h>

#include <utility>

namespace mnemo::kernels {
namespace {

TEST(Int8Peak, EveryVectorIsaMatchesTheReference) {
  int checked = 0;
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
    const Int8Peak* peak = int8_peak(isa);
    if (!isa_supported(isa)) {
      EXPECT_EQ(peak, nullptr);
      continue;
    }
    ASSERT_NE(peak, nullptr) << isa_name(isa);
    // 4 * 100 * -120 per round: 60,000 rounds leave int32 far behind (the lanes wrap).
    for (const int64_t rounds : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{60000}}) {
      for (const auto& [ua, sb] : {std::pair<uint8_t, int8_t>{100, -120}, {255, 64}, {3, 5}}) {
        const Int8PeakRun got = peak->run(rounds, ua, sb);
        const Int8PeakRun want = int8_peak_reference(*peak, rounds, ua, sb);
        EXPECT_EQ(got.macs, want.macs) << isa_name(isa) << " rounds " << rounds;
        EXPECT_EQ(got.checksum, want.checksum) << isa_name(isa) << " rounds " << rounds << " ua " << int{ua};
      }
    }
    ++checked;
  }
  EXPECT_EQ(int8_peak(Isa::kScalar), nullptr);
  if (isa_supported(Isa::kAvx2)) {
    EXPECT_GT(checked, 0);
  }
}

TEST(Int8Peak, TheReferenceCountsEveryLane) {
  const Int8Peak shape{3, 4, nullptr};
  const Int8PeakRun r = int8_peak_reference(shape, 2, 10, -3);
  EXPECT_EQ(r.macs, 2 * 3 * 4 * 4);
  // Lanes of accumulator a end at a + 2 * 4 * 10 * -3 = a - 240; four lanes each.
  EXPECT_EQ(r.checksum, 4 * ((0 - 240) + (1 - 240) + (2 - 240)));
}

}  // namespace
}  // namespace mnemo::kernels

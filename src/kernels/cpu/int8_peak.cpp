#include "kernels/cpu/int8_peak.h"

namespace mnemo::kernels {
namespace int8_peak_avx2 {
extern const Int8Peak kPeak;
}  // namespace int8_peak_avx2
namespace int8_peak_avx512 {
extern const Int8Peak kPeak;
}  // namespace int8_peak_avx512

const Int8Peak* int8_peak(Isa isa) {
  if (isa == Isa::kAvx512 && isa_supported(Isa::kAvx512)) return &int8_peak_avx512::kPeak;
  if (isa == Isa::kAvx2 && isa_supported(Isa::kAvx2)) return &int8_peak_avx2::kPeak;
  return nullptr;
}

Int8PeakRun int8_peak_reference(const Int8Peak& peak, int64_t rounds, uint8_t ua, int8_t sb) {
  const auto per_round = static_cast<uint32_t>(4 * static_cast<int32_t>(ua) * static_cast<int32_t>(sb));
  Int8PeakRun out;
  out.macs = rounds * peak.accumulators * peak.lanes * 4;
  for (int a = 0; a < peak.accumulators; ++a) {
    for (int l = 0; l < peak.lanes; ++l) {
      uint32_t lane = static_cast<uint32_t>(a);
      for (int64_t r = 0; r < rounds; ++r) lane += per_round;  // wraps like the vector lanes
      out.checksum += static_cast<int32_t>(lane);
    }
  }
  return out;
}

}  // namespace mnemo::kernels

// int8_peak.h on AVX-512 VNNI: vpdpbusd on 512-bit vectors, the GEMM tiles' instruction.
#include <immintrin.h>

#include "kernels/cpu/int8_peak.h"

namespace mnemo::kernels::int8_peak_avx512 {
namespace {

constexpr int kAccumulators = 12;  // more than latency x throughput on the CPUs that have VNNI

Int8PeakRun run(int64_t rounds, uint8_t ua, int8_t sb) {
  __m512i acc[kAccumulators];
  for (int a = 0; a < kAccumulators; ++a) acc[a] = _mm512_set1_epi32(a);
  __m512i u = _mm512_set1_epi8(static_cast<char>(ua));
  __m512i s = _mm512_set1_epi8(sb);
  for (int64_t r = 0; r < rounds; ++r) {
    for (int a = 0; a < kAccumulators; ++a) acc[a] = _mm512_dpbusd_epi32(acc[a], u, s);
    asm volatile("" : "+v"(u), "+v"(s));  // the operands are opaque: nothing is hoisted or folded
  }
  Int8PeakRun out;
  out.macs = rounds * kAccumulators * 16 * 4;
  alignas(64) int32_t lanes[16];
  for (int a = 0; a < kAccumulators; ++a) {
    _mm512_store_si512(lanes, acc[a]);
    for (int32_t lane : lanes) out.checksum += lane;
  }
  return out;
}

}  // namespace

extern const Int8Peak kPeak;
const Int8Peak kPeak{kAccumulators, 16, run};

}  // namespace mnemo::kernels::int8_peak_avx512

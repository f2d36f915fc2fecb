// int8_peak.h on AVX2: vpmaddubsw (pairs of u8 x s8 into int16), vpmaddwd against ones (pairs of
// those into int32) and vpaddd, the AVX2 kernels' integer dot product, on 256-bit vectors.
#include <immintrin.h>

#include "kernels/cpu/int8_peak.h"

namespace mnemo::kernels::int8_peak_avx2 {
namespace {

constexpr int kAccumulators = 12;

Int8PeakRun run(int64_t rounds, uint8_t ua, int8_t sb) {
  __m256i acc[kAccumulators];
  for (int a = 0; a < kAccumulators; ++a) acc[a] = _mm256_set1_epi32(a);
  __m256i u = _mm256_set1_epi8(static_cast<char>(ua));
  __m256i s = _mm256_set1_epi8(sb);
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t r = 0; r < rounds; ++r) {
    for (int a = 0; a < kAccumulators; ++a) {
      acc[a] = _mm256_add_epi32(acc[a], _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), ones));
    }
    asm volatile("" : "+x"(u), "+x"(s));  // the operands are opaque: nothing is hoisted or folded
  }
  Int8PeakRun out;
  out.macs = rounds * kAccumulators * 8 * 4;
  alignas(32) int32_t lanes[8];
  for (int a = 0; a < kAccumulators; ++a) {
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), acc[a]);
    for (int32_t lane : lanes) out.checksum += lane;
  }
  return out;
}

}  // namespace

extern const Int8Peak kPeak;
const Int8Peak kPeak{kAccumulators, 8, run};

}  // namespace mnemo::kernels::int8_peak_avx2

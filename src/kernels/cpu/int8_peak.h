// The int8 dot-product peak of one core: the instruction the quantised GEMM kernels are built on
// (AVX-512 VNNI's vpdpbusd on 512-bit vectors; on AVX2, vpmaddubsw + vpmaddwd + vpaddd), issued
// back to back into independent accumulators and nothing else. `mnemo bench` measures it beside
// the batched decode, so that the compute side of the roofline is a measured figure like the
// bandwidth side: batch-32 decode is bounded by these instructions, batch 1 by memory.
//
// Every lane of every accumulator starts at its accumulator's index and gains 4 * ua * sb per
// round (int32, wrapping); the checksum is the sum of all lanes. The values stay clear of
// vpmaddubsw's int16 saturation when 2 * ua * |sb| <= 32767.
#pragma once

#include <cstdint>

#include "kernels/cpu/type_kernels.h"

namespace mnemo::kernels {

struct Int8PeakRun {
  int64_t macs = 0;      // multiply-adds done
  int64_t checksum = 0;  // the sum of every lane of every accumulator at the end
};

struct Int8Peak {
  int accumulators;  // independent dependency chains
  int lanes;         // 32-bit lanes of one accumulator
  Int8PeakRun (*run)(int64_t rounds, uint8_t ua, int8_t sb);
};

// The probe for `isa`, or nullptr where there is none (the scalar variant has no int8 vector
// instruction to measure) or the CPU lacks `isa`.
const Int8Peak* int8_peak(Isa isa);

// What `peak.run` must return, computed lane by lane in plain integer arithmetic.
Int8PeakRun int8_peak_reference(const Int8Peak& peak, int64_t rounds, uint8_t ua, int8_t sb);

}  // namespace mnemo::kernels

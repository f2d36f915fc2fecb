// The scalar end of every argmax variant (argmax.h), defined once in argmax.cpp (no ISA flags):
// the SIMD variants keep per-lane first maxima over x[0, from) and hand them here with the rest.
#pragma once

#include <cstdint>

namespace mnemo::kernels {

// The lowest index among the lanes holding the largest value (a lane still at -inf never wins),
// then x[from, n) in order with strict >: argmax.h's answer. lanes = 0, from = 0 is the scalar
// reference itself.
int32_t argmax_finish(const float* lane_values, const int32_t* lane_indices, int lanes, const float* x, int64_t from,
                      int64_t n);

}  // namespace mnemo::kernels

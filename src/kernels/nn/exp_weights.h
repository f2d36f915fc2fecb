// The unnormalised probabilities of sampling at a temperature: w[i] = e^((x[i] - max) / T) over
// the whole vocabulary, for every sequence of every step that samples without a top-k, top-p or
// min-p cut (the OpenAI API's default), so it has SIMD variants.
//
// Every variant gives the same bits: e^z comes from one fixed sequence of correctly rounded
// operations (z * log2(e) rounded to an integer n, the remainder by two FMAs, a degree-6
// polynomial by FMAs, times 2^n built exactly), and the sums are kept in fixed lanes: lane l adds
// the weights of i = l, l + 16, ... in order, in double. So a seeded draw is the same on every
// machine. Weights below e^-87 (about 1.6e-38 of the largest) are 0, as are those of -inf and NaN
// logits; +inf counts as the largest float (the sampler's sanitising).
#pragma once

#include <cstdint>

#include "kernels/cpu/type_kernels.h"

namespace mnemo::kernels {

inline constexpr int kExpWeightLanes = 16;

// out[0, n) = the weights; lane_sums[l] (l < 16) = the sum of lane l over the whole groups of 16,
// lane_sums[16] = the sum of the last n % 16 in order. `max` is the largest sanitised value of x,
// `temperature` > 0 and finite.
void exp_weights(const float* x, int64_t n, float max, float temperature, float* out, double* lane_sums);

// The variant for `isa` (tests); the scalar one is the reference. Falls back to the scalar one
// where the CPU lacks `isa`.
using ExpWeightsFn = void (*)(const float* x, int64_t n, float max, float temperature, float* out, double* lane_sums);
ExpWeightsFn exp_weights_kernel(Isa isa);

}  // namespace mnemo::kernels

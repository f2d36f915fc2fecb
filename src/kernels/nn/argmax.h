// The index of the largest logit: greedy decoding runs it over the whole vocabulary (262,144
// for Gemma 3) for every sequence of every step, so it has SIMD variants.
//
// Semantics, on every ISA: NaN counts as -inf and +inf as the largest float (the sampler's
// sanitising); ties go to the lowest index; when every value is -inf (or NaN) the answer is 0.
// The SIMD variants keep, per lane, the first maximum of the indices that lane sees (in order),
// then take the lowest index among the lanes holding the overall maximum: the same answer as
// the scalar loop, not just an equally good one.
#pragma once

#include <cstdint>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/type_kernels.h"

namespace mnemo::kernels {

// On the detected ISA. n > 0.
int32_t argmax(const float* x, int64_t n);

// The same over the indices `allowed` holds (a TokenMask's words, util/token_mask.h) alone; 0
// when none of them is above -inf. Scalar: the reference of a masked folding product, and the
// answer where the product does not fold.
int32_t argmax_allowed(const float* x, int64_t n, const uint64_t* allowed);

// The index of row `row`'s largest output from the lanes a folding product left
// (kernels/cpu/matmul.h's ArgmaxRows): the same answer as argmax over the row's outputs.
int32_t argmax_of_lanes(const ArgmaxRows& rows, int64_t row, int64_t n_rows);

// The variant for `isa` (tests); the scalar one is the reference. Falls back to the scalar one
// where the CPU lacks `isa`.
using ArgmaxFn = int32_t (*)(const float* x, int64_t n);
ArgmaxFn argmax_kernel(Isa isa);

}  // namespace mnemo::kernels

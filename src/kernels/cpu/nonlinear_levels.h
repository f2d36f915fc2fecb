// The level tables of the non-linear formats and MXFP4's scale. `static` for the reason given in
// k_scales.h (SIMD translation units include this too).
#pragma once

#include <cstdint>
#include <cstring>

namespace mnemo::kernels {

// IQ4_NL and IQ4_XS: sixteen levels spaced like the quantiles of a bell-shaped distribution.
alignas(16) static constexpr int8_t kIq4nlLevels[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                                        1,    13,   25,  38,  53,  69,  89,  113};

// MXFP4: the E2M1 values {0, 0.5, 1, 1.5, 2, 3, 4, 6} and their negatives, doubled so that they
// are integers; the scale below is halved to match.
alignas(16) static constexpr int8_t kMxfp4Levels[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// Half of the E8M0 scale 2^(e - 127), exactly (e = 0 and 1 give subnormals; 255 would be NaN in
// the OCP format, read here as 2^127 like ggml does).
static inline float e8m0_half_to_float(uint8_t e) {
  const uint32_t bits = e < 2 ? (0x00200000u << e) : (static_cast<uint32_t>(e) - 1) << 23;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

}  // namespace mnemo::kernels

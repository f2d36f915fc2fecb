// The constants of e^z shared by every variant of exp_weights (exp_weights.h): the same numbers
// in the same operations is what makes them agree bit for bit.
#pragma once

namespace mnemo::kernels::exp_weights_constants {

inline constexpr float kLowest = -87.0f;  // below: weight 0 (e^-87 is near the smallest normal float)
inline constexpr float kLog2e = 1.44269504088896341f;
inline constexpr float kLn2High = 0.693145751953125f;  // ln 2 = kLn2High + kLn2Low, the high part exact in few bits
inline constexpr float kLn2Low = 1.428606765330187045e-06f;
// e^r = 1 + r + r^2/2 + ... + r^6/720 for |r| <= ln(2)/2, evaluated from the highest term.
inline constexpr float kPoly[7] = {1.0f / 720.0f, 1.0f / 120.0f, 1.0f / 24.0f, 1.0f / 6.0f, 0.5f, 1.0f, 1.0f};

}  // namespace mnemo::kernels::exp_weights_constants

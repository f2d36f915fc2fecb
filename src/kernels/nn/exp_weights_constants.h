// The constants of e^z shared by every variant of exp_weights (exp_weights.h): the same numbers
// in the same operations is what makes them agree bit for bit. Plain constexpr (internal
// linkage): an inline variable would be one program-wide symbol emitted from the ISA-specific
// objects too, which tests/kernels/check_isa_isolation.cmake refuses.
#pragma once

namespace mnemo::kernels::exp_weights_constants {

constexpr float kLowest = -87.0f;  // below: weight 0 (e^-87 is near the smallest normal float)
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2High = 0.693145751953125f;  // ln 2 = kLn2High + kLn2Low, the high part exact in few bits
constexpr float kLn2Low = 1.428606765330187045e-06f;
// e^r = 1 + r + r^2/2 + ... + r^6/720 for |r| <= ln(2)/2, evaluated from the highest term.
constexpr float kPoly[7] = {1.0f / 720.0f, 1.0f / 120.0f, 1.0f / 24.0f, 1.0f / 6.0f, 0.5f, 1.0f, 1.0f};

}  // namespace mnemo::kernels::exp_weights_constants

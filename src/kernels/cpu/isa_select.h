// How the kernel variant is chosen, separated from the CPU query so that it can be tested.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "kernels/cpu/type_kernels.h"

namespace mnemo::kernels {

// "scalar" | "avx2" | "avx512" -> the Isa; nullopt for anything else.
std::optional<Isa> parse_isa(std::string_view name);

// The variant to use: the best the CPU has, capped by MNEMO_ISA's value when set (null when
// unset). An unknown value caps nothing; `warning` (if given) then says so.
Isa select_isa(Isa best_supported, const char* requested, std::string* warning = nullptr);

}  // namespace mnemo::kernels

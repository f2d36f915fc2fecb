// CPU feature detection and the MNEMO_ISA cap.
#include <cpuid.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "kernels/cpu/isa_select.h"
#include "kernels/cpu/type_kernels.h"

namespace mnemo::kernels {
namespace {

// Read from CPUID directly rather than through __builtin_cpu_supports, which not every compiler
// knows F16C or VNNI by. A feature only counts if the OS also saves its registers (XCR0).
struct CpuFeatures {
  bool avx2 = false;    // with FMA and F16C
  bool avx512 = false;  // F, BW, VL, DQ and VNNI
};

uint64_t os_saved_state() {
  uint32_t lo, hi;
  __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<uint64_t>(hi) << 32) | lo;
}

CpuFeatures query_cpu() {
  CpuFeatures features;
  unsigned eax, ebx, ecx, edx;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return features;
  const bool fma = ecx & (1u << 12), osxsave = ecx & (1u << 27), avx = ecx & (1u << 28),
             f16c = ecx & (1u << 29);
  if (!osxsave || !avx) return features;
  const uint64_t xcr0 = os_saved_state();
  const bool ymm_saved = (xcr0 & 0x6) == 0x6;     // SSE and AVX state
  const bool zmm_saved = (xcr0 & 0xe6) == 0xe6;   // plus opmask and the upper ZMM state
  if (__get_cpuid_max(0, nullptr) < 7) return features;
  __cpuid_count(7, 0, eax, ebx, ecx, edx);
  const bool avx2 = ebx & (1u << 5);
  const bool avx512f = ebx & (1u << 16), avx512dq = ebx & (1u << 17), avx512bw = ebx & (1u << 30),
             avx512vl = ebx & (1u << 31), avx512vnni = ecx & (1u << 11);
  features.avx2 = ymm_saved && avx2 && fma && f16c;
  features.avx512 = features.avx2 && zmm_saved && avx512f && avx512dq && avx512bw && avx512vl && avx512vnni;
  return features;
}

Isa best_supported_isa() {
  const CpuFeatures features = query_cpu();
  if (features.avx512) return Isa::kAvx512;
  if (features.avx2) return Isa::kAvx2;
  return Isa::kScalar;
}

}  // namespace

std::string_view isa_name(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return "scalar";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512: return "avx512";
  }
  return "unknown";
}

std::optional<Isa> parse_isa(std::string_view name) {
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (name == isa_name(isa)) return isa;
  }
  return std::nullopt;
}

Isa select_isa(Isa best_supported, const char* requested, std::string* warning) {
  if (requested == nullptr || *requested == '\0') return best_supported;
  const std::optional<Isa> cap = parse_isa(requested);
  if (!cap) {
    if (warning != nullptr) {
      *warning = std::string("MNEMO_ISA=") + requested +
                 " is not one of scalar, avx2, avx512; ignoring it";
    }
    return best_supported;
  }
  return static_cast<int>(*cap) < static_cast<int>(best_supported) ? *cap : best_supported;
}

bool isa_supported(Isa isa) {
  static const Isa best = best_supported_isa();
  return static_cast<int>(isa) <= static_cast<int>(best);
}

Isa detected_isa() {
  static const Isa chosen = [] {
    std::string warning;
    const Isa isa = select_isa(best_supported_isa(), std::getenv("MNEMO_ISA"), &warning);
    if (!warning.empty()) std::fprintf(stderr, "mnemo: %s\n", warning.c_str());
    return isa;
  }();
  return chosen;
}

}  // namespace mnemo::kernels

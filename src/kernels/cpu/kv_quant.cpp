#include "kernels/cpu/kv_quant.h"

namespace mnemo::kernels {

const KvQuantKernels& kv_quant_kernels(Isa isa) { return isa == Isa::kScalar ? scalar::kKvQuant : avx2::kKvQuant; }

const KvQuantKernels& kv_quant_kernels() {
  static const KvQuantKernels& chosen = kv_quant_kernels(detected_isa());
  return chosen;
}

}  // namespace mnemo::kernels

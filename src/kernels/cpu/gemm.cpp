// The GEMM dispatch table: AVX-512 VNNI kernels where the CPU has them, else (and for the formats
// AVX-512 has none of) the AVX2 ones; none on the scalar ISA (matmul then uses vec_dot per
// element).
#include "kernels/cpu/gemm.h"

#include "kernels/cpu/avx2_kernels.h"
#include "kernels/cpu/avx512_kernels.h"

namespace mnemo::kernels {
namespace {

const GemmKernel* avx2_gemm(DType type) {
  switch (type) {
    case DType::Q4_0: return &avx2::kGemmQ4_0;
    case DType::Q4_1: return &avx2::kGemmQ4_1;
    case DType::Q5_0: return &avx2::kGemmQ5_0;
    case DType::Q5_1: return &avx2::kGemmQ5_1;
    case DType::Q8_0: return &avx2::kGemmQ8_0;
    case DType::IQ4_NL: return &avx2::kGemmIQ4_NL;
    case DType::MXFP4: return &avx2::kGemmMXFP4;
    case DType::Q2_K: return &avx2::kGemmQ2_K;
    case DType::Q3_K: return &avx2::kGemmQ3_K;
    case DType::Q4_K: return &avx2::kGemmQ4_K;
    case DType::Q5_K: return &avx2::kGemmQ5_K;
    case DType::Q6_K: return &avx2::kGemmQ6_K;
    case DType::IQ4_XS: return &avx2::kGemmIQ4_XS;
    default: return nullptr;
  }
}

const GemmKernel* avx512_gemm(DType type) {
  switch (type) {
    case DType::F32: return &avx512::kGemmF32;
    case DType::F16: return &avx512::kGemmF16;
    case DType::BF16: return &avx512::kGemmBF16;
    case DType::Q4_0: return &avx512::kGemmQ4_0;
    case DType::Q4_1: return &avx512::kGemmQ4_1;
    case DType::Q5_0: return &avx512::kGemmQ5_0;
    case DType::Q5_1: return &avx512::kGemmQ5_1;
    case DType::Q8_0: return &avx512::kGemmQ8_0;
    case DType::Q4_K: return &avx512::kGemmQ4_K;
    case DType::Q5_K: return &avx512::kGemmQ5_K;
    case DType::Q6_K: return &avx512::kGemmQ6_K;
    default: return avx2_gemm(type);
  }
}

}  // namespace

const GemmKernel* gemm_kernel(DType type, Isa isa) {
  if (!isa_supported(isa)) return nullptr;
  switch (isa) {
    case Isa::kAvx2: return avx2_gemm(type);
    case Isa::kAvx512: return avx512_gemm(type);
    case Isa::kScalar: return nullptr;
  }
  return nullptr;
}

const GemmKernel* gemm_kernel(DType type) {
  static const Isa isa = detected_isa();
  return gemm_kernel(type, isa);
}

}  // namespace mnemo::kernels

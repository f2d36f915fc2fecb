// The dispatch table and ISA selection.
#include <gtest/gtest.h>

#include <string>

#include "kernel_test_util.h"
#include "kernels/cpu/isa_select.h"

namespace mnemo::kernels {
namespace {

TEST(KernelsDispatch, EveryTypeHasItsKernelsOnEverySupportedIsa) {
  const std::pair<DType, DType> expected_vec_dot_types[] = {
      {DType::F32, DType::F32},   {DType::F16, DType::F16},   {DType::BF16, DType::BF16},
      {DType::Q4_0, DType::Q8_0}, {DType::Q4_1, DType::Q8_1}, {DType::Q5_0, DType::Q8_0},
      {DType::Q5_1, DType::Q8_1}, {DType::Q8_0, DType::Q8_0}, {DType::Q4_K, DType::Q8_K},
      {DType::Q5_K, DType::Q8_K}, {DType::Q6_K, DType::Q8_K}, {DType::Q8_1, DType::Q8_1},
      {DType::Q8_K, DType::Q8_K}, {DType::Q2_K, DType::Q8_K}, {DType::Q3_K, DType::Q8_K},
      {DType::IQ4_NL, DType::Q8_0}, {DType::IQ4_XS, DType::Q8_K}, {DType::MXFP4, DType::Q8_0}};
  for (Isa isa : testing::supported_isas()) {
    for (const auto& [type, vec_dot_type] : expected_vec_dot_types) {
      const TypeKernels* kernels = type_kernels(type, isa);
      ASSERT_NE(kernels, nullptr) << dtype_name(type) << " " << isa_name(isa);
      EXPECT_EQ(kernels->type, type);
      EXPECT_EQ(kernels->vec_dot_type, vec_dot_type) << dtype_name(type);
      EXPECT_NE(kernels->to_float, nullptr);
      EXPECT_NE(kernels->from_float, nullptr);
      EXPECT_NE(kernels->quantize_activations, nullptr);
      const bool activation_only = type == DType::Q8_1 || type == DType::Q8_K;
      EXPECT_EQ(kernels->vec_dot == nullptr, activation_only) << dtype_name(type);
      // The activation format has kernels of its own.
      EXPECT_NE(type_kernels(vec_dot_type, isa), nullptr);
    }
  }
}

TEST(KernelsDispatch, TypesWithoutKernels) {
  for (DType type : {DType::IQ2_XXS, DType::IQ3_S, DType::IQ1_M, DType::TQ2_0, DType::I32}) {
    EXPECT_EQ(type_kernels(type), nullptr) << dtype_name(type);
  }
}

TEST(KernelsDispatch, DefaultTableIsTheDetectedIsas) {
  EXPECT_TRUE(isa_supported(detected_isa()));
  EXPECT_EQ(type_kernels(DType::Q8_0), type_kernels(DType::Q8_0, detected_isa()));
}

TEST(KernelsDispatch, SimdTablesUseSimdKernels) {
  // Guards against a table silently falling back to scalar code.
  for (Isa isa : testing::supported_simd_isas()) {
    for (DType type : testing::weight_types()) {
      EXPECT_NE(type_kernels(type, isa)->vec_dot, type_kernels(type, Isa::kScalar)->vec_dot)
          << dtype_name(type) << " " << isa_name(isa);
    }
  }
}

TEST(KernelsIsa, ScalarIsAlwaysSupported) { EXPECT_TRUE(isa_supported(Isa::kScalar)); }

TEST(KernelsIsa, Avx512ImpliesAvx2) {
  if (isa_supported(Isa::kAvx512)) {
    EXPECT_TRUE(isa_supported(Isa::kAvx2));
  }
}

TEST(KernelsIsa, NamesRoundTrip) {
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) EXPECT_EQ(parse_isa(isa_name(isa)), isa);
  EXPECT_EQ(parse_isa("AVX2"), std::nullopt);
  EXPECT_EQ(parse_isa(""), std::nullopt);
}

TEST(KernelsIsa, EnvironmentCapsButNeverRaises) {
  EXPECT_EQ(select_isa(Isa::kAvx512, nullptr), Isa::kAvx512);
  EXPECT_EQ(select_isa(Isa::kAvx512, ""), Isa::kAvx512);
  EXPECT_EQ(select_isa(Isa::kAvx512, "scalar"), Isa::kScalar);
  EXPECT_EQ(select_isa(Isa::kAvx512, "avx2"), Isa::kAvx2);
  EXPECT_EQ(select_isa(Isa::kAvx2, "avx512"), Isa::kAvx2);
  EXPECT_EQ(select_isa(Isa::kScalar, "avx2"), Isa::kScalar);
  std::string warning;
  EXPECT_EQ(select_isa(Isa::kAvx2, "sse9", &warning), Isa::kAvx2);
  EXPECT_NE(warning.find("sse9"), std::string::npos);
}

}  // namespace
}  // namespace mnemo::kernels

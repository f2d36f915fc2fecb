// The dispatch tables: one per ISA, each starting from the one below it and replacing the kernels
// that ISA has its own version of. Built once; taking a kernel's address runs none of its code.
#include "kernels/cpu/type_kernels.h"

#include <array>
#include <cstdlib>

#include "kernels/cpu/avx2_kernels.h"
#include "kernels/cpu/avx512_kernels.h"
#include "kernels/cpu/scalar_kernels.h"

namespace mnemo::kernels {
namespace {

constexpr int kTypeCount = 18;
using Table = std::array<TypeKernels, kTypeCount>;

Table scalar_table() {
  namespace s = scalar;
  using D = DType;
  return {{
      {D::F32, D::F32, s::f32_to_float, s::f32_from_float, s::vec_dot_f32, s::f32_from_float},
      {D::F16, D::F16, s::f16_to_float, s::f16_from_float, s::vec_dot_f16, s::f16_from_float},
      {D::BF16, D::BF16, s::bf16_to_float, s::bf16_from_float, s::vec_dot_bf16, s::bf16_from_float},
      {D::Q4_0, D::Q8_0, s::q4_0_to_float, s::q4_0_from_float, s::vec_dot_q4_0_q8_0, s::q4_0_from_float},
      {D::Q4_1, D::Q8_1, s::q4_1_to_float, s::q4_1_from_float, s::vec_dot_q4_1_q8_1, s::q4_1_from_float},
      {D::Q5_0, D::Q8_0, s::q5_0_to_float, s::q5_0_from_float, s::vec_dot_q5_0_q8_0, s::q5_0_from_float},
      {D::Q5_1, D::Q8_1, s::q5_1_to_float, s::q5_1_from_float, s::vec_dot_q5_1_q8_1, s::q5_1_from_float},
      {D::Q8_0, D::Q8_0, s::q8_0_to_float, s::q8_0_from_float, s::vec_dot_q8_0_q8_0, s::q8_0_from_float},
      {D::Q8_1, D::Q8_1, s::q8_1_to_float, s::q8_1_from_float, nullptr, s::q8_1_from_float},
      {D::Q4_K, D::Q8_K, s::q4_K_to_float, s::q4_K_from_float, s::vec_dot_q4_K_q8_K, s::q4_K_from_float},
      {D::Q5_K, D::Q8_K, s::q5_K_to_float, s::q5_K_from_float, s::vec_dot_q5_K_q8_K, s::q5_K_from_float},
      {D::Q6_K, D::Q8_K, s::q6_K_to_float, s::q6_K_from_float, s::vec_dot_q6_K_q8_K, s::q6_K_from_float},
      {D::Q2_K, D::Q8_K, s::q2_K_to_float, s::q2_K_from_float, s::vec_dot_q2_K_q8_K, s::q2_K_from_float},
      {D::Q3_K, D::Q8_K, s::q3_K_to_float, s::q3_K_from_float, s::vec_dot_q3_K_q8_K, s::q3_K_from_float},
      {D::IQ4_NL, D::Q8_0, s::iq4_nl_to_float, s::iq4_nl_from_float, s::vec_dot_iq4_nl_q8_0, s::iq4_nl_from_float},
      {D::IQ4_XS, D::Q8_K, s::iq4_xs_to_float, s::iq4_xs_from_float, s::vec_dot_iq4_xs_q8_K, s::iq4_xs_from_float},
      {D::MXFP4, D::Q8_0, s::mxfp4_to_float, s::mxfp4_from_float, s::vec_dot_mxfp4_q8_0, s::mxfp4_from_float},
      {D::Q8_K, D::Q8_K, s::q8_K_to_float, s::q8_K_from_float, nullptr, s::q8_K_from_float},
  }};
}

TypeKernels& entry(Table& table, DType type) {
  for (TypeKernels& kernels : table) {
    if (kernels.type == type) return kernels;
  }
  std::abort();  // only called with the types listed in scalar_table()
}

Table avx2_table() {
  Table table = scalar_table();
  entry(table, DType::F32).vec_dot = avx2::vec_dot_f32;
  TypeKernels& f16 = entry(table, DType::F16);
  f16.to_float = avx2::f16_to_float;
  f16.from_float = avx2::f16_from_float;  // exact: the same bits as the scalar conversion
  f16.quantize_activations = avx2::f16_from_float;
  f16.vec_dot = avx2::vec_dot_f16;
  TypeKernels& bf16 = entry(table, DType::BF16);
  bf16.to_float = avx2::bf16_to_float;
  bf16.from_float = avx2::bf16_from_float;
  bf16.quantize_activations = avx2::bf16_from_float;
  bf16.vec_dot = avx2::vec_dot_bf16;
  entry(table, DType::Q4_0).vec_dot = avx2::vec_dot_q4_0_q8_0;
  entry(table, DType::Q4_1).vec_dot = avx2::vec_dot_q4_1_q8_1;
  entry(table, DType::Q5_0).vec_dot = avx2::vec_dot_q5_0_q8_0;
  entry(table, DType::Q5_1).vec_dot = avx2::vec_dot_q5_1_q8_1;
  entry(table, DType::Q8_0).vec_dot = avx2::vec_dot_q8_0_q8_0;
  entry(table, DType::Q8_0).quantize_activations = avx2::q8_0_quantize_activations;
  entry(table, DType::Q8_1).quantize_activations = avx2::q8_1_quantize_activations;
  entry(table, DType::Q4_K).vec_dot = avx2::vec_dot_q4_K_q8_K;
  entry(table, DType::Q5_K).vec_dot = avx2::vec_dot_q5_K_q8_K;
  entry(table, DType::Q6_K).vec_dot = avx2::vec_dot_q6_K_q8_K;
  entry(table, DType::Q2_K).vec_dot = avx2::vec_dot_q2_K_q8_K;
  entry(table, DType::Q3_K).vec_dot = avx2::vec_dot_q3_K_q8_K;
  entry(table, DType::IQ4_NL).vec_dot = avx2::vec_dot_iq4_nl_q8_0;
  entry(table, DType::IQ4_XS).vec_dot = avx2::vec_dot_iq4_xs_q8_K;
  entry(table, DType::MXFP4).vec_dot = avx2::vec_dot_mxfp4_q8_0;
  TypeKernels& q8_k = entry(table, DType::Q8_K);
  q8_k.from_float = avx2::q8_K_from_float;  // bit-identical to the scalar reference
  q8_k.quantize_activations = avx2::q8_K_from_float;
  return table;
}

Table avx512_table() {
  Table table = avx2_table();
  entry(table, DType::F32).vec_dot = avx512::vec_dot_f32;
  entry(table, DType::F16).vec_dot = avx512::vec_dot_f16;
  entry(table, DType::Q4_0).vec_dot = avx512::vec_dot_q4_0_q8_0;
  entry(table, DType::Q5_0).vec_dot = avx512::vec_dot_q5_0_q8_0;
  entry(table, DType::Q8_0).vec_dot = avx512::vec_dot_q8_0_q8_0;
  entry(table, DType::Q8_0).quantize_activations = avx512::q8_0_quantize_activations;
  entry(table, DType::Q4_K).vec_dot = avx512::vec_dot_q4_K_q8_K;
  entry(table, DType::Q5_K).vec_dot = avx512::vec_dot_q5_K_q8_K;
  entry(table, DType::Q6_K).vec_dot = avx512::vec_dot_q6_K_q8_K;
  return table;
}

const Table& table_for(Isa isa) {
  static const std::array<Table, 3> tables = {scalar_table(), avx2_table(), avx512_table()};
  return tables[static_cast<size_t>(isa)];
}

}  // namespace

const TypeKernels* type_kernels(DType type, Isa isa) {
  if (!isa_supported(isa)) return nullptr;
  for (const TypeKernels& kernels : table_for(isa)) {
    if (kernels.type == type) return &kernels;
  }
  return nullptr;
}

const TypeKernels* type_kernels(DType type) {
  static const Isa isa = detected_isa();
  return type_kernels(type, isa);
}

}  // namespace mnemo::kernels

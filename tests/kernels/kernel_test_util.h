// Shared helpers of the kernel tests: the types and ISAs to cover, random rows of any type, and
// exact float references.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/block_q8_1.h"
#include "kernels/cpu/type_kernels.h"
#include "tensor/dtype.h"
#include "tensor/quant_blocks.h"
#include "util/fp16.h"

namespace mnemo::kernels::testing {

// The weight types with a vec_dot, and the activation-only formats.
inline const std::vector<DType>& weight_types() {
  static const std::vector<DType> types = {DType::F32,  DType::F16,  DType::BF16,   DType::Q4_0,   DType::Q4_1,
                                           DType::Q5_0, DType::Q5_1, DType::Q8_0,   DType::Q2_K,   DType::Q3_K,
                                           DType::Q4_K, DType::Q5_K, DType::Q6_K,   DType::IQ4_NL, DType::IQ4_XS,
                                           DType::MXFP4};
  return types;
}

inline const std::vector<DType>& all_kernel_types() {
  static const std::vector<DType> types = [] {
    std::vector<DType> all = weight_types();
    all.push_back(DType::Q8_1);
    all.push_back(DType::Q8_K);
    return all;
  }();
  return types;
}

inline std::vector<Isa> supported_isas() {
  std::vector<Isa> isas;
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (isa_supported(isa)) isas.push_back(isa);
  }
  return isas;
}

inline std::vector<Isa> supported_simd_isas() {
  std::vector<Isa> isas = supported_isas();
  isas.erase(isas.begin());
  return isas;
}

inline int64_t block_elems(DType type) { return dtype_info(type).block_elems; }

// Gaussian values with a few outliers, like activations and weights of a real model.
inline std::vector<float> random_floats(int64_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> normal(0.0f, scale);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  std::vector<float> values(static_cast<size_t>(n));
  for (float& v : values) {
    v = normal(rng);
    if (uniform(rng) < 0.01f) v *= 8.0f;
  }
  return values;
}

inline uint16_t random_half(std::mt19937& rng, float lo, float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  return fp32_to_fp16(dist(rng));
}

// A row of `type` with uniformly random level bits (every bit pattern, including extremes such
// as -128 in Q8_0 or negative Q6_K scales) and random but finite, moderate scales.
inline std::vector<uint8_t> random_weight_row(DType type, int64_t n, std::mt19937& rng) {
  std::vector<uint8_t> row(row_bytes(type, n));
  std::uniform_int_distribution<int> byte(0, 255);
  for (uint8_t& b : row) b = static_cast<uint8_t>(byte(rng));
  const DTypeInfo info = dtype_info(type);
  const int64_t blocks = n / info.block_elems;
  auto fix_halves = [&](auto* blocks_ptr, auto fix) {
    for (int64_t b = 0; b < blocks; ++b) fix(blocks_ptr[b]);
  };
  switch (type) {
    case DType::F32: {
      const std::vector<float> values = random_floats(n, rng);
      std::memcpy(row.data(), values.data(), row.size());
      break;
    }
    case DType::F16:
    case DType::BF16: {
      const std::vector<float> values = random_floats(n, rng);
      auto* h = reinterpret_cast<uint16_t*>(row.data());
      for (int64_t i = 0; i < n; ++i) {
        h[i] = type == DType::F16 ? fp32_to_fp16(values[i]) : fp32_to_bf16(values[i]);
      }
      break;
    }
    case DType::Q4_0:
      fix_halves(reinterpret_cast<BlockQ4_0*>(row.data()), [&](BlockQ4_0& b) { b.d = random_half(rng, -0.1f, 0.1f); });
      break;
    case DType::Q4_1:
      fix_halves(reinterpret_cast<BlockQ4_1*>(row.data()), [&](BlockQ4_1& b) {
        b.d = random_half(rng, 0.0f, 0.1f);
        b.m = random_half(rng, -1.0f, 0.0f);
      });
      break;
    case DType::Q5_0:
      fix_halves(reinterpret_cast<BlockQ5_0*>(row.data()), [&](BlockQ5_0& b) { b.d = random_half(rng, -0.05f, 0.05f); });
      break;
    case DType::Q5_1:
      fix_halves(reinterpret_cast<BlockQ5_1*>(row.data()), [&](BlockQ5_1& b) {
        b.d = random_half(rng, 0.0f, 0.05f);
        b.m = random_half(rng, -1.0f, 0.0f);
      });
      break;
    case DType::Q8_0:
      fix_halves(reinterpret_cast<BlockQ8_0*>(row.data()), [&](BlockQ8_0& b) { b.d = random_half(rng, -0.01f, 0.01f); });
      break;
    case DType::Q4_K:
      fix_halves(reinterpret_cast<BlockQ4_K*>(row.data()), [&](BlockQ4_K& b) {
        b.d = random_half(rng, 0.0f, 0.01f);
        b.dmin = random_half(rng, 0.0f, 0.01f);
      });
      break;
    case DType::Q5_K:
      fix_halves(reinterpret_cast<BlockQ5_K*>(row.data()), [&](BlockQ5_K& b) {
        b.d = random_half(rng, 0.0f, 0.005f);
        b.dmin = random_half(rng, 0.0f, 0.01f);
      });
      break;
    case DType::Q6_K:
      fix_halves(reinterpret_cast<BlockQ6_K*>(row.data()), [&](BlockQ6_K& b) { b.d = random_half(rng, -0.001f, 0.001f); });
      break;
    case DType::Q2_K:
      fix_halves(reinterpret_cast<BlockQ2_K*>(row.data()), [&](BlockQ2_K& b) {
        b.d = random_half(rng, 0.0f, 0.02f);
        b.dmin = random_half(rng, 0.0f, 0.02f);
      });
      break;
    case DType::Q3_K:
      fix_halves(reinterpret_cast<BlockQ3_K*>(row.data()), [&](BlockQ3_K& b) { b.d = random_half(rng, -0.005f, 0.005f); });
      break;
    case DType::IQ4_NL:
      fix_halves(reinterpret_cast<BlockIQ4_NL*>(row.data()), [&](BlockIQ4_NL& b) { b.d = random_half(rng, -0.01f, 0.01f); });
      break;
    case DType::IQ4_XS:
      fix_halves(reinterpret_cast<BlockIQ4_XS*>(row.data()), [&](BlockIQ4_XS& b) { b.d = random_half(rng, -0.001f, 0.001f); });
      break;
    case DType::MXFP4: {
      // E8M0 scales around 2^-7 (e = 255 would read as 2^127 and overflow any dot product).
      std::uniform_int_distribution<int> exponent(110, 125);
      for (int64_t b = 0; b < blocks; ++b) reinterpret_cast<BlockMXFP4*>(row.data())[b].e = static_cast<uint8_t>(exponent(rng));
      break;
    }
    default:
      break;
  }
  return row;
}

// Activations for a weight type: random floats quantised by the scalar reference quantiser.
inline std::vector<uint8_t> random_activation_row(DType weight_type, int64_t n, std::mt19937& rng,
                                                  std::vector<float>* floats = nullptr) {
  const TypeKernels* weight = type_kernels(weight_type, Isa::kScalar);
  const TypeKernels* act = type_kernels(weight->vec_dot_type, Isa::kScalar);
  const std::vector<float> values = random_floats(n, rng);
  std::vector<uint8_t> row(row_bytes(weight->vec_dot_type, n));
  act->from_float(values.data(), row.data(), n);
  if (floats != nullptr) *floats = values;
  return row;
}

inline std::vector<float> to_floats(DType type, const void* data, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  type_kernels(type, Isa::kScalar)->to_float(data, out.data(), n);
  return out;
}

struct DotReference {
  double dot = 0.0;        // sum of w[i] * a[i] in double
  double magnitude = 0.0;  // sum of |w[i] * a[i]|: the scale of any rounding error
};

inline DotReference float_dot(const std::vector<float>& w, const std::vector<float>& a) {
  DotReference ref;
  for (size_t i = 0; i < w.size(); ++i) {
    const double p = static_cast<double>(w[i]) * static_cast<double>(a[i]);
    ref.dot += p;
    ref.magnitude += std::fabs(p);
  }
  return ref;
}

// Q8_1 stores d * sum(qs) as a half of its own (ggml's format), which can differ from the
// product of the stored half d and the sum by a few units of half precision: the dot product of
// a _1 format inherits that in its minimum term, m * s. Zero for the other types.
inline double q8_1_sum_rounding(DType weight_type, const void* w, const void* a, int64_t n) {
  if (weight_type != DType::Q4_1 && weight_type != DType::Q5_1) return 0.0;
  const auto* ab = static_cast<const BlockQ8_1*>(a);
  double slack = 0.0;
  for (int64_t b = 0; b < n / kQK; ++b) {
    const uint16_t m = weight_type == DType::Q4_1 ? static_cast<const BlockQ4_1*>(w)[b].m
                                                  : static_cast<const BlockQ5_1*>(w)[b].m;
    slack += std::fabs(fp16_to_fp32(m) * fp16_to_fp32(ab[b].s)) * 0x1p-9;
  }
  return slack;
}

// Element counts to test: a single block up to many, including odd block counts (tails of the
// unrolled loops) and, for the plain types, counts that are no multiple of a SIMD width.
inline std::vector<int64_t> test_lengths(DType type) {
  const int64_t block = block_elems(type);
  if (block == 1) return {1, 7, 8, 15, 16, 17, 31, 33, 63, 64, 65, 100, 640, 4096, 4099};
  if (block == 32) return {32, 64, 96, 160, 224, 640, 4096, 4128};
  return {256, 512, 768, 1280, 4096};
}

inline std::string type_isa_name(DType type, Isa isa) {
  return std::string(dtype_name(type)) + "_" + std::string(isa_name(isa));
}

}  // namespace mnemo::kernels::testing

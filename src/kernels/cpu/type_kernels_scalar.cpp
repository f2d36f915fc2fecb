// Scalar kernels of the 32-element block formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) and of the
// activation format Q8_1. The reference for the SIMD variants and for llama.cpp's numerics:
// quantisers round as ggml's reference quantisers do, dot products take exact integer sums per
// block and scale them once.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/block_q8_1.h"
#include "kernels/cpu/scalar_kernels.h"
#include "tensor/quant_blocks.h"
#include "util/fp16.h"

namespace mnemo::kernels::scalar {
namespace {

constexpr int kHalf = kQK / 2;  // element j and j + 16 share byte j of a nibble array

// The element of largest magnitude, sign included (the first of equals), which the symmetric
// formats map to their most negative level so that it is represented exactly.
float signed_extreme(const float* x, int n) {
  float amax = 0.0f;
  float extreme = 0.0f;
  for (int j = 0; j < n; ++j) {
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      extreme = x[j];
    }
  }
  return extreme;
}

float abs_max(const float* x, int n) {
  float amax = 0.0f;
  for (int j = 0; j < n; ++j) amax = std::fmax(amax, std::fabs(x[j]));
  return amax;
}

void min_max(const float* x, int n, float& lo, float& hi) {
  lo = x[0];
  hi = x[0];
  for (int j = 1; j < n; ++j) {
    lo = std::fmin(lo, x[j]);
    hi = std::fmax(hi, x[j]);
  }
}

uint32_t load_fifth_bits(const uint8_t* qh) {
  uint32_t bits;
  std::memcpy(&bits, qh, sizeof(bits));
  return bits;
}

int fifth_bit(uint32_t bits, int j) { return static_cast<int>((bits >> j) & 1u) << 4; }

int low_nibble(uint8_t byte) { return byte & 0x0f; }
int high_nibble(uint8_t byte) { return byte >> 4; }

// Quantises one Q8_0-style block (ggml's reference rounding); returns the sum of the levels.
int quantize_q8_block(const float* x, uint16_t& d_half, int8_t* qs, float& d_out) {
  const float d = abs_max(x, kQK) / 127.0f;
  const float inverse = d != 0.0f ? 1.0f / d : 0.0f;
  d_half = fp32_to_fp16(d);
  d_out = d;
  int sum = 0;
  for (int j = 0; j < kQK; ++j) {
    qs[j] = static_cast<int8_t>(std::round(x[j] * inverse));
    sum += qs[j];
  }
  return sum;
}

}  // namespace

// ---- Q4_0: d * (q - 8), q in [0, 16)

void q4_0_to_float(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockQ4_0*>(src);
  for (int64_t b = 0; b < n / kQK; ++b, dst += kQK) {
    const float d = fp16_to_fp32(blocks[b].d);
    for (int j = 0; j < kHalf; ++j) {
      dst[j] = static_cast<float>(low_nibble(blocks[b].qs[j]) - 8) * d;
      dst[j + kHalf] = static_cast<float>(high_nibble(blocks[b].qs[j]) - 8) * d;
    }
  }
}

void q4_0_from_float(const float* src, void* dst, int64_t n) {
  auto* blocks = static_cast<BlockQ4_0*>(dst);
  for (int64_t b = 0; b < n / kQK; ++b, src += kQK) {
    const float d = signed_extreme(src, kQK) / -8.0f;
    const float inverse = d != 0.0f ? 1.0f / d : 0.0f;
    blocks[b].d = fp32_to_fp16(d);
    for (int j = 0; j < kHalf; ++j) {
      const int lo = std::min(15, static_cast<int>(src[j] * inverse + 8.5f));
      const int hi = std::min(15, static_cast<int>(src[j + kHalf] * inverse + 8.5f));
      blocks[b].qs[j] = static_cast<uint8_t>(lo | (hi << 4));
    }
  }
}

float vec_dot_q4_0_q8_0(int64_t n, const void* w, const void* a) {
  const auto* wb = static_cast<const BlockQ4_0*>(w);
  const auto* ab = static_cast<const BlockQ8_0*>(a);
  float sum = 0.0f;
  for (int64_t b = 0; b < n / kQK; ++b) {
    int sumi = 0;
    for (int j = 0; j < kHalf; ++j) {
      sumi += (low_nibble(wb[b].qs[j]) - 8) * ab[b].qs[j];
      sumi += (high_nibble(wb[b].qs[j]) - 8) * ab[b].qs[j + kHalf];
    }
    sum += static_cast<float>(sumi) * (fp16_to_fp32(wb[b].d) * fp16_to_fp32(ab[b].d));
  }
  return sum;
}

// ---- Q4_1: d * q + m, q in [0, 16)

void q4_1_to_float(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockQ4_1*>(src);
  for (int64_t b = 0; b < n / kQK; ++b, dst += kQK) {
    const float d = fp16_to_fp32(blocks[b].d);
    const float m = fp16_to_fp32(blocks[b].m);
    for (int j = 0; j < kHalf; ++j) {
      dst[j] = static_cast<float>(low_nibble(blocks[b].qs[j])) * d + m;
      dst[j + kHalf] = static_cast<float>(high_nibble(blocks[b].qs[j])) * d + m;
    }
  }
}

void q4_1_from_float(const float* src, void* dst, int64_t n) {
  auto* blocks = static_cast<BlockQ4_1*>(dst);
  for (int64_t b = 0; b < n / kQK; ++b, src += kQK) {
    float lo, hi;
    min_max(src, kQK, lo, hi);
    const float d = (hi - lo) / 15.0f;
    const float inverse = d != 0.0f ? 1.0f / d : 0.0f;
    blocks[b].d = fp32_to_fp16(d);
    blocks[b].m = fp32_to_fp16(lo);
    for (int j = 0; j < kHalf; ++j) {
      const int q0 = std::min(15, static_cast<int>((src[j] - lo) * inverse + 0.5f));
      const int q1 = std::min(15, static_cast<int>((src[j + kHalf] - lo) * inverse + 0.5f));
      blocks[b].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

float vec_dot_q4_1_q8_1(int64_t n, const void* w, const void* a) {
  const auto* wb = static_cast<const BlockQ4_1*>(w);
  const auto* ab = static_cast<const BlockQ8_1*>(a);
  float sum = 0.0f;
  for (int64_t b = 0; b < n / kQK; ++b) {
    int sumi = 0;
    for (int j = 0; j < kHalf; ++j) {
      sumi += low_nibble(wb[b].qs[j]) * ab[b].qs[j];
      sumi += high_nibble(wb[b].qs[j]) * ab[b].qs[j + kHalf];
    }
    sum += (fp16_to_fp32(wb[b].d) * fp16_to_fp32(ab[b].d)) * static_cast<float>(sumi) +
           fp16_to_fp32(wb[b].m) * fp16_to_fp32(ab[b].s);
  }
  return sum;
}

// ---- Q5_0: d * (q - 16), q in [0, 32); bit 4 of element j is bit j of qh

void q5_0_to_float(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockQ5_0*>(src);
  for (int64_t b = 0; b < n / kQK; ++b, dst += kQK) {
    const float d = fp16_to_fp32(blocks[b].d);
    const uint32_t bits = load_fifth_bits(blocks[b].qh);
    for (int j = 0; j < kHalf; ++j) {
      const int q0 = low_nibble(blocks[b].qs[j]) | fifth_bit(bits, j);
      const int q1 = high_nibble(blocks[b].qs[j]) | fifth_bit(bits, j + kHalf);
      dst[j] = static_cast<float>(q0 - 16) * d;
      dst[j + kHalf] = static_cast<float>(q1 - 16) * d;
    }
  }
}

void q5_0_from_float(const float* src, void* dst, int64_t n) {
  auto* blocks = static_cast<BlockQ5_0*>(dst);
  for (int64_t b = 0; b < n / kQK; ++b, src += kQK) {
    const float d = signed_extreme(src, kQK) / -16.0f;
    const float inverse = d != 0.0f ? 1.0f / d : 0.0f;
    blocks[b].d = fp32_to_fp16(d);
    uint32_t bits = 0;
    for (int j = 0; j < kHalf; ++j) {
      const int q0 = std::min(31, static_cast<int>(src[j] * inverse + 16.5f));
      const int q1 = std::min(31, static_cast<int>(src[j + kHalf] * inverse + 16.5f));
      blocks[b].qs[j] = static_cast<uint8_t>((q0 & 0x0f) | ((q1 & 0x0f) << 4));
      bits |= static_cast<uint32_t>(q0 >> 4) << j;
      bits |= static_cast<uint32_t>(q1 >> 4) << (j + kHalf);
    }
    std::memcpy(blocks[b].qh, &bits, sizeof(bits));
  }
}

float vec_dot_q5_0_q8_0(int64_t n, const void* w, const void* a) {
  const auto* wb = static_cast<const BlockQ5_0*>(w);
  const auto* ab = static_cast<const BlockQ8_0*>(a);
  float sum = 0.0f;
  for (int64_t b = 0; b < n / kQK; ++b) {
    const uint32_t bits = load_fifth_bits(wb[b].qh);
    int sumi = 0;
    for (int j = 0; j < kHalf; ++j) {
      const int q0 = low_nibble(wb[b].qs[j]) | fifth_bit(bits, j);
      const int q1 = high_nibble(wb[b].qs[j]) | fifth_bit(bits, j + kHalf);
      sumi += (q0 - 16) * ab[b].qs[j] + (q1 - 16) * ab[b].qs[j + kHalf];
    }
    sum += static_cast<float>(sumi) * (fp16_to_fp32(wb[b].d) * fp16_to_fp32(ab[b].d));
  }
  return sum;
}

// ---- Q5_1: d * q + m, q in [0, 32)

void q5_1_to_float(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockQ5_1*>(src);
  for (int64_t b = 0; b < n / kQK; ++b, dst += kQK) {
    const float d = fp16_to_fp32(blocks[b].d);
    const float m = fp16_to_fp32(blocks[b].m);
    const uint32_t bits = load_fifth_bits(blocks[b].qh);
    for (int j = 0; j < kHalf; ++j) {
      const int q0 = low_nibble(blocks[b].qs[j]) | fifth_bit(bits, j);
      const int q1 = high_nibble(blocks[b].qs[j]) | fifth_bit(bits, j + kHalf);
      dst[j] = static_cast<float>(q0) * d + m;
      dst[j + kHalf] = static_cast<float>(q1) * d + m;
    }
  }
}

void q5_1_from_float(const float* src, void* dst, int64_t n) {
  auto* blocks = static_cast<BlockQ5_1*>(dst);
  for (int64_t b = 0; b < n / kQK; ++b, src += kQK) {
    float lo, hi;
    min_max(src, kQK, lo, hi);
    const float d = (hi - lo) / 31.0f;
    const float inverse = d != 0.0f ? 1.0f / d : 0.0f;
    blocks[b].d = fp32_to_fp16(d);
    blocks[b].m = fp32_to_fp16(lo);
    uint32_t bits = 0;
    for (int j = 0; j < kHalf; ++j) {
      const int q0 = std::min(31, static_cast<int>((src[j] - lo) * inverse + 0.5f));
      const int q1 = std::min(31, static_cast<int>((src[j + kHalf] - lo) * inverse + 0.5f));
      blocks[b].qs[j] = static_cast<uint8_t>((q0 & 0x0f) | ((q1 & 0x0f) << 4));
      bits |= static_cast<uint32_t>(q0 >> 4) << j;
      bits |= static_cast<uint32_t>(q1 >> 4) << (j + kHalf);
    }
    std::memcpy(blocks[b].qh, &bits, sizeof(bits));
  }
}

float vec_dot_q5_1_q8_1(int64_t n, const void* w, const void* a) {
  const auto* wb = static_cast<const BlockQ5_1*>(w);
  const auto* ab = static_cast<const BlockQ8_1*>(a);
  float sum = 0.0f;
  for (int64_t b = 0; b < n / kQK; ++b) {
    const uint32_t bits = load_fifth_bits(wb[b].qh);
    int sumi = 0;
    for (int j = 0; j < kHalf; ++j) {
      const int q0 = low_nibble(wb[b].qs[j]) | fifth_bit(bits, j);
      const int q1 = high_nibble(wb[b].qs[j]) | fifth_bit(bits, j + kHalf);
      sumi += q0 * ab[b].qs[j] + q1 * ab[b].qs[j + kHalf];
    }
    sum += (fp16_to_fp32(wb[b].d) * fp16_to_fp32(ab[b].d)) * static_cast<float>(sumi) +
           fp16_to_fp32(wb[b].m) * fp16_to_fp32(ab[b].s);
  }
  return sum;
}

// ---- Q8_0: d * q, q in [-127, 127]

void q8_0_to_float(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockQ8_0*>(src);
  for (int64_t b = 0; b < n / kQK; ++b, dst += kQK) {
    const float d = fp16_to_fp32(blocks[b].d);
    for (int j = 0; j < kQK; ++j) dst[j] = static_cast<float>(blocks[b].qs[j]) * d;
  }
}

void q8_0_from_float(const float* src, void* dst, int64_t n) {
  auto* blocks = static_cast<BlockQ8_0*>(dst);
  for (int64_t b = 0; b < n / kQK; ++b, src += kQK) {
    float d;
    quantize_q8_block(src, blocks[b].d, blocks[b].qs, d);
  }
}

float vec_dot_q8_0_q8_0(int64_t n, const void* w, const void* a) {
  const auto* wb = static_cast<const BlockQ8_0*>(w);
  const auto* ab = static_cast<const BlockQ8_0*>(a);
  float sum = 0.0f;
  for (int64_t b = 0; b < n / kQK; ++b) {
    int sumi = 0;
    for (int j = 0; j < kQK; ++j) sumi += wb[b].qs[j] * ab[b].qs[j];
    sum += static_cast<float>(sumi) * (fp16_to_fp32(wb[b].d) * fp16_to_fp32(ab[b].d));
  }
  return sum;
}

// ---- Q8_1 (activations only)

void q8_1_to_float(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockQ8_1*>(src);
  for (int64_t b = 0; b < n / kQK; ++b, dst += kQK) {
    const float d = fp16_to_fp32(blocks[b].d);
    for (int j = 0; j < kQK; ++j) dst[j] = static_cast<float>(blocks[b].qs[j]) * d;
  }
}

void q8_1_from_float(const float* src, void* dst, int64_t n) {
  auto* blocks = static_cast<BlockQ8_1*>(dst);
  for (int64_t b = 0; b < n / kQK; ++b, src += kQK) {
    float d;
    const int sum = quantize_q8_block(src, blocks[b].d, blocks[b].qs, d);
    blocks[b].s = fp32_to_fp16(static_cast<float>(sum) * d);
  }
}

}  // namespace mnemo::kernels::scalar

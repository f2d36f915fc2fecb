// Scalar kernels of the 256-element "K" formats (Q4_K, Q5_K, Q6_K) and of their activation
// format Q8_K. Dequantisation and dot products follow ggml's arithmetic; the weight quantisers
// are plain round-to-nearest ones (ggml searches for better scales), good enough for test models.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/k_scales.h"
#include "kernels/cpu/scalar_kernels.h"
#include "tensor/quant_blocks.h"
#include "util/fp16.h"

namespace mnemo::kernels::scalar {
namespace {

constexpr int kSub = kQKK / kKSubBlocks;  // 32 elements per Q4_K/Q5_K sub-block
constexpr int kSub6 = 16;                 // elements per Q6_K sub-block
constexpr int kChunk = 64;                // two sub-blocks share the bytes of one 32-byte run

int round_half_even(float x) { return static_cast<int>(std::nearbyint(x)); }

// Sub-block scale and minimum (both >= 0) such that x = scale * q - min, q in [0, levels].
struct AffineRange {
  float scale;
  float min;
};

AffineRange affine_range(const float* x, int n, int levels) {
  float lo = 0.0f;  // the minimum is stored unsigned, so the range always includes 0
  float hi = x[0];
  for (int j = 0; j < n; ++j) {
    lo = std::min(lo, x[j]);
    hi = std::max(hi, x[j]);
  }
  return {(hi - lo) / static_cast<float>(levels), -lo};
}

// 6-bit multiple of the super-block scale; rounded up so the sub-block's range still fits.
uint8_t six_bit_scale(float value, float unit) {
  if (unit <= 0.0f) return 0;
  return static_cast<uint8_t>(std::min(63.0f, std::ceil(value / unit)));
}

uint8_t six_bit_min(float value, float unit) {
  if (unit <= 0.0f) return 0;
  return static_cast<uint8_t>(std::min(63, round_half_even(value / unit)));
}

// Shared by Q4_K and Q5_K: chooses the scales, writes d/dmin/scales and the levels in [0, levels].
template <class Block>
void quantize_affine_k(const float* x, Block& block, int levels, uint8_t* q) {
  AffineRange ranges[kKSubBlocks];
  float max_scale = 0.0f;
  float max_min = 0.0f;
  for (int s = 0; s < kKSubBlocks; ++s) {
    ranges[s] = affine_range(x + s * kSub, kSub, levels);
    max_scale = std::max(max_scale, ranges[s].scale);
    max_min = std::max(max_min, ranges[s].min);
  }
  block.d = fp32_to_fp16(max_scale / 63.0f);
  block.dmin = fp32_to_fp16(max_min / 63.0f);
  const float d = fp16_to_fp32(block.d);
  const float dmin = fp16_to_fp32(block.dmin);
  uint8_t scales[kKSubBlocks];
  uint8_t mins[kKSubBlocks];
  for (int s = 0; s < kKSubBlocks; ++s) {
    scales[s] = six_bit_scale(ranges[s].scale, d);
    mins[s] = six_bit_min(ranges[s].min, dmin);
    const float step = d * scales[s];
    const float offset = dmin * mins[s];
    for (int j = 0; j < kSub; ++j) {
      const int level = step > 0.0f ? round_half_even((x[s * kSub + j] + offset) / step) : 0;
      q[s * kSub + j] = static_cast<uint8_t>(std::clamp(level, 0, levels));
    }
  }
  pack_k_scales(scales, mins, block.scales);
}

// Q4_K/Q5_K element order: in each 64-element chunk, the first 32 are the low nibbles of a
// 32-byte run and the last 32 its high nibbles.
void pack_nibbles_k(const uint8_t* q, uint8_t* qs) {
  for (int c = 0; c < kQKK / kChunk; ++c) {
    for (int l = 0; l < 32; ++l) {
      qs[c * 32 + l] =
          static_cast<uint8_t>((q[c * kChunk + l] & 0x0f) | ((q[c * kChunk + 32 + l] & 0x0f) << 4));
    }
  }
}

// Levels of one Q4_K/Q5_K super-block (without the fifth bits when qh is null).
void unpack_levels_k(const uint8_t* qs, const uint8_t* qh, uint8_t* q) {
  for (int c = 0; c < kQKK / kChunk; ++c) {
    for (int l = 0; l < 32; ++l) {
      int lo = qs[c * 32 + l] & 0x0f;
      int hi = qs[c * 32 + l] >> 4;
      if (qh != nullptr) {
        lo |= ((qh[l] >> (2 * c)) & 1) << 4;
        hi |= ((qh[l] >> (2 * c + 1)) & 1) << 4;
      }
      q[c * kChunk + l] = static_cast<uint8_t>(lo);
      q[c * kChunk + 32 + l] = static_cast<uint8_t>(hi);
    }
  }
}

void affine_k_to_float(uint16_t d_half, uint16_t dmin_half, const uint8_t* packed,
                       const uint8_t* q, float* dst) {
  const float d = fp16_to_fp32(d_half);
  const float dmin = fp16_to_fp32(dmin_half);
  uint8_t scales[kKSubBlocks];
  uint8_t mins[kKSubBlocks];
  unpack_k_scales(packed, scales, mins);
  for (int s = 0; s < kKSubBlocks; ++s) {
    const float step = d * scales[s];
    const float offset = dmin * mins[s];
    for (int j = 0; j < kSub; ++j) dst[s * kSub + j] = step * q[s * kSub + j] - offset;
  }
}

// sum over the super-block of level * activation, each sub-block weighted by its scale, and the
// activations' per-16 sums weighted by the mins.
float affine_k_dot(uint16_t d_half, uint16_t dmin_half, const uint8_t* packed, const uint8_t* q,
                   const BlockQ8_K& a) {
  uint8_t scales[kKSubBlocks];
  uint8_t mins[kKSubBlocks];
  unpack_k_scales(packed, scales, mins);
  int sum_mins = 0;
  for (int j = 0; j < kQKK / 16; ++j) sum_mins += a.bsums[j] * mins[j / 2];
  int sum = 0;
  for (int s = 0; s < kKSubBlocks; ++s) {
    int sub = 0;
    for (int j = 0; j < kSub; ++j) sub += q[s * kSub + j] * a.qs[s * kSub + j];
    sum += scales[s] * sub;
  }
  const float d = fp16_to_fp32(d_half) * a.d;
  const float dmin = fp16_to_fp32(dmin_half) * a.d;
  return d * static_cast<float>(sum) - dmin * static_cast<float>(sum_mins);
}

// Q6_K levels minus 32, in element order. In each 128-element half, element l < 32 of group g
// (g = 0..3, 32 elements each) keeps its low 4 bits in ql[(g & 1) * 32 + l] (the low nibble for
// g < 2, the high one for g >= 2) and its top 2 bits in bits 2g..2g+1 of qh[l].
void unpack_levels_q6(const BlockQ6_K& block, int8_t* q) {
  for (int half = 0; half < 2; ++half) {
    const uint8_t* ql = block.ql + 64 * half;
    const uint8_t* qh = block.qh + 32 * half;
    for (int g = 0; g < 4; ++g) {
      for (int l = 0; l < 32; ++l) {
        const uint8_t low = ql[(g & 1) * 32 + l];
        const int nibble = g < 2 ? (low & 0x0f) : (low >> 4);
        const int high = (qh[l] >> (2 * g)) & 3;
        q[128 * half + 32 * g + l] = static_cast<int8_t>((nibble | (high << 4)) - 32);
      }
    }
  }
}

}  // namespace

// ---- Q4_K: d * sc[s] * q - dmin * m[s], q in [0, 16), 8 sub-blocks of 32

void q4_K_to_float(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockQ4_K*>(src);
  uint8_t q[kQKK];
  for (int64_t b = 0; b < n / kQKK; ++b, dst += kQKK) {
    unpack_levels_k(blocks[b].qs, nullptr, q);
    affine_k_to_float(blocks[b].d, blocks[b].dmin, blocks[b].scales, q, dst);
  }
}

void q4_K_from_float(const float* src, void* dst, int64_t n) {
  auto* blocks = static_cast<BlockQ4_K*>(dst);
  uint8_t q[kQKK];
  for (int64_t b = 0; b < n / kQKK; ++b, src += kQKK) {
    quantize_affine_k(src, blocks[b], 15, q);
    pack_nibbles_k(q, blocks[b].qs);
  }
}

float vec_dot_q4_K_q8_K(int64_t n, const void* w, const void* a) {
  const auto* wb = static_cast<const BlockQ4_K*>(w);
  const auto* ab = static_cast<const BlockQ8_K*>(a);
  uint8_t q[kQKK];
  float sum = 0.0f;
  for (int64_t b = 0; b < n / kQKK; ++b) {
    unpack_levels_k(wb[b].qs, nullptr, q);
    sum += affine_k_dot(wb[b].d, wb[b].dmin, wb[b].scales, q, ab[b]);
  }
  return sum;
}

// ---- Q5_K: as Q4_K with a fifth bit per element, q in [0, 32)

void q5_K_to_float(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockQ5_K*>(src);
  uint8_t q[kQKK];
  for (int64_t b = 0; b < n / kQKK; ++b, dst += kQKK) {
    unpack_levels_k(blocks[b].qs, blocks[b].qh, q);
    affine_k_to_float(blocks[b].d, blocks[b].dmin, blocks[b].scales, q, dst);
  }
}

void q5_K_from_float(const float* src, void* dst, int64_t n) {
  auto* blocks = static_cast<BlockQ5_K*>(dst);
  uint8_t q[kQKK];
  for (int64_t b = 0; b < n / kQKK; ++b, src += kQKK) {
    quantize_affine_k(src, blocks[b], 31, q);
    pack_nibbles_k(q, blocks[b].qs);
    std::memset(blocks[b].qh, 0, sizeof(blocks[b].qh));
    for (int c = 0; c < kQKK / kChunk; ++c) {
      for (int l = 0; l < 32; ++l) {
        blocks[b].qh[l] |= static_cast<uint8_t>((q[c * kChunk + l] >> 4) << (2 * c));
        blocks[b].qh[l] |= static_cast<uint8_t>((q[c * kChunk + 32 + l] >> 4) << (2 * c + 1));
      }
    }
  }
}

float vec_dot_q5_K_q8_K(int64_t n, const void* w, const void* a) {
  const auto* wb = static_cast<const BlockQ5_K*>(w);
  const auto* ab = static_cast<const BlockQ8_K*>(a);
  uint8_t q[kQKK];
  float sum = 0.0f;
  for (int64_t b = 0; b < n / kQKK; ++b) {
    unpack_levels_k(wb[b].qs, wb[b].qh, q);
    sum += affine_k_dot(wb[b].d, wb[b].dmin, wb[b].scales, q, ab[b]);
  }
  return sum;
}

// ---- Q6_K: d * sc[s] * (q - 32), q in [0, 64), 16 signed 8-bit scales for sub-blocks of 16
// (layout: see unpack_levels_q6)

void q6_K_to_float(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockQ6_K*>(src);
  int8_t q[kQKK];
  for (int64_t b = 0; b < n / kQKK; ++b, dst += kQKK) {
    unpack_levels_q6(blocks[b], q);
    const float d = fp16_to_fp32(blocks[b].d);
    for (int e = 0; e < kQKK; ++e) {
      dst[e] = d * static_cast<float>(blocks[b].scales[e / kSub6]) * static_cast<float>(q[e]);
    }
  }
}

void q6_K_from_float(const float* src, void* dst, int64_t n) {
  auto* blocks = static_cast<BlockQ6_K*>(dst);
  for (int64_t b = 0; b < n / kQKK; ++b, src += kQKK) {
    BlockQ6_K& block = blocks[b];
    // Symmetric: +-amax maps to +-31, so no level is clipped.
    float sub_scales[kQKK / kSub6];
    float max_scale = 0.0f;
    for (int s = 0; s < kQKK / kSub6; ++s) {
      float amax = 0.0f;
      for (int j = 0; j < kSub6; ++j) amax = std::max(amax, std::fabs(src[s * kSub6 + j]));
      sub_scales[s] = amax / 31.0f;
      max_scale = std::max(max_scale, sub_scales[s]);
    }
    block.d = fp32_to_fp16(max_scale / 127.0f);
    const float d = fp16_to_fp32(block.d);
    std::memset(block.ql, 0, sizeof(block.ql));
    std::memset(block.qh, 0, sizeof(block.qh));
    for (int s = 0; s < kQKK / kSub6; ++s) {
      const int scale = d > 0.0f ? std::min(127, static_cast<int>(std::ceil(sub_scales[s] / d))) : 0;
      block.scales[s] = static_cast<int8_t>(scale);
      const float step = d * static_cast<float>(scale);
      for (int j = 0; j < kSub6; ++j) {
        const int e = s * kSub6 + j;
        const int level = step > 0.0f ? std::clamp(round_half_even(src[e] / step), -32, 31) : 0;
        const int q = level + 32;
        const int half = e / 128;
        const int group = (e % 128) / 32;
        const int l = e % 32;
        uint8_t& low = block.ql[half * 64 + (group & 1) * 32 + l];
        low = static_cast<uint8_t>(low | (group < 2 ? (q & 0x0f) : (q & 0x0f) << 4));
        block.qh[half * 32 + l] = static_cast<uint8_t>(block.qh[half * 32 + l] | ((q >> 4) << (2 * group)));
      }
    }
  }
}

float vec_dot_q6_K_q8_K(int64_t n, const void* w, const void* a) {
  const auto* wb = static_cast<const BlockQ6_K*>(w);
  const auto* ab = static_cast<const BlockQ8_K*>(a);
  int8_t q[kQKK];
  float sum = 0.0f;
  for (int64_t b = 0; b < n / kQKK; ++b) {
    unpack_levels_q6(wb[b], q);
    int sumi = 0;
    for (int s = 0; s < kQKK / kSub6; ++s) {
      int sub = 0;
      for (int j = 0; j < kSub6; ++j) sub += q[s * kSub6 + j] * ab[b].qs[s * kSub6 + j];
      sumi += wb[b].scales[s] * sub;
    }
    sum += fp16_to_fp32(wb[b].d) * ab[b].d * static_cast<float>(sumi);
  }
  return sum;
}

// ---- Q8_K (activations): d * q with a float d, plus the sum of every 16 levels

void q8_K_to_float(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockQ8_K*>(src);
  for (int64_t b = 0; b < n / kQKK; ++b, dst += kQKK) {
    for (int j = 0; j < kQKK; ++j) dst[j] = blocks[b].d * static_cast<float>(blocks[b].qs[j]);
  }
}

// ggml's reference: the element of largest magnitude (the first of equals) maps to -127 exactly,
// i.e. the scale keeps the sign of that element; levels are clamped to 127 above.
void q8_K_from_float(const float* src, void* dst, int64_t n) {
  auto* blocks = static_cast<BlockQ8_K*>(dst);
  for (int64_t b = 0; b < n / kQKK; ++b, src += kQKK) {
    BlockQ8_K& block = blocks[b];
    float amax = 0.0f;
    float extreme = 0.0f;
    for (int j = 0; j < kQKK; ++j) {
      if (std::fabs(src[j]) > amax) {
        amax = std::fabs(src[j]);
        extreme = src[j];
      }
    }
    if (amax == 0.0f) {
      std::memset(&block, 0, sizeof(block));
      continue;
    }
    const float inverse_scale = -127.0f / extreme;
    for (int j = 0; j < kQKK; ++j) {
      block.qs[j] = static_cast<int8_t>(std::min(127, round_half_even(inverse_scale * src[j])));
    }
    for (int g = 0; g < kQKK / 16; ++g) {
      int sum = 0;
      for (int j = 0; j < 16; ++j) sum += block.qs[g * 16 + j];
      block.bsums[g] = static_cast<int16_t>(sum);
    }
    block.d = 1.0f / inverse_scale;
  }
}

}  // namespace mnemo::kernels::scalar

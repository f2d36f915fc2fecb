// Scalar kernels of the 2- and 3-bit K formats (Q2_K, Q3_K) against Q8_K activations. Sixteen
// sub-blocks of 16 per super-block; dequantisation follows ggml's arithmetic, and each super-block
// of a dot product is one exact integer sum before its scales are applied. The weight quantisers
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

constexpr int kSub = 16;                // elements per sub-block
constexpr int kSubBlocks = kQKK / kSub;  // 16

int round_half_even(float x) { return static_cast<int>(std::nearbyint(x)); }

// Element e's place in the two-bit planes: byte 32 * (e / 128) + e % 32, bits 2 * (e % 128 / 32).
int two_bit_byte(int e) { return 32 * (e / 128) + e % 32; }
int two_bit_shift(int e) { return 2 * (e % 128 / 32); }

// Q3_K's third bit of element e: bit 4 * (e / 128) + e % 128 / 32 of hmask[e % 32].
int high_bit_index(int e) { return 4 * (e / 128) + e % 128 / 32; }

void unpack_q2_levels(const BlockQ2_K& block, uint8_t* q) {
  for (int e = 0; e < kQKK; ++e) q[e] = static_cast<uint8_t>((block.qs[two_bit_byte(e)] >> two_bit_shift(e)) & 3);
}

// Levels in [-4, 4).
void unpack_q3_levels(const BlockQ3_K& block, int8_t* q) {
  for (int e = 0; e < kQKK; ++e) {
    const int low = (block.qs[two_bit_byte(e)] >> two_bit_shift(e)) & 3;
    const bool high = (block.hmask[e % 32] >> high_bit_index(e)) & 1;
    q[e] = static_cast<int8_t>(low - (high ? 0 : 4));
  }
}

// The signed value of largest magnitude among x[0, n) (the first of equals), 0 for all zeros.
float signed_extreme(const float* x, int n) {
  float extreme = 0.0f;
  for (int j = 0; j < n; ++j) {
    if (std::fabs(x[j]) > std::fabs(extreme)) extreme = x[j];
  }
  return extreme;
}

}  // namespace

// ---- Q2_K: d * sc * q - dmin * m, q in [0, 4)

void q2_K_to_float(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockQ2_K*>(src);
  uint8_t q[kQKK];
  for (int64_t b = 0; b < n / kQKK; ++b, dst += kQKK) {
    unpack_q2_levels(blocks[b], q);
    const float d = fp16_to_fp32(blocks[b].d);
    const float dmin = fp16_to_fp32(blocks[b].dmin);
    for (int s = 0; s < kSubBlocks; ++s) {
      const float step = d * static_cast<float>(blocks[b].scales[s] & 0x0f);
      const float offset = dmin * static_cast<float>(blocks[b].scales[s] >> 4);
      for (int j = 0; j < kSub; ++j) dst[s * kSub + j] = step * static_cast<float>(q[s * kSub + j]) - offset;
    }
  }
}

void q2_K_from_float(const float* src, void* dst, int64_t n) {
  auto* blocks = static_cast<BlockQ2_K*>(dst);
  for (int64_t b = 0; b < n / kQKK; ++b, src += kQKK) {
    BlockQ2_K& block = blocks[b];
    // Per sub-block x = scale * q - min with the minimum stored unsigned (the range includes 0).
    float scales[kSubBlocks], mins[kSubBlocks];
    float max_scale = 0.0f, max_min = 0.0f;
    for (int s = 0; s < kSubBlocks; ++s) {
      float lo = 0.0f, hi = src[s * kSub];
      for (int j = 0; j < kSub; ++j) {
        lo = std::min(lo, src[s * kSub + j]);
        hi = std::max(hi, src[s * kSub + j]);
      }
      scales[s] = (hi - lo) / 3.0f;
      mins[s] = -lo;
      max_scale = std::max(max_scale, scales[s]);
      max_min = std::max(max_min, mins[s]);
    }
    block.d = fp32_to_fp16(max_scale / 15.0f);
    block.dmin = fp32_to_fp16(max_min / 15.0f);
    const float d = fp16_to_fp32(block.d);
    const float dmin = fp16_to_fp32(block.dmin);
    std::memset(block.qs, 0, sizeof(block.qs));
    for (int s = 0; s < kSubBlocks; ++s) {
      // The scale rounds up so that the sub-block's range still fits in four levels.
      const int sc = d > 0.0f ? std::min(15, static_cast<int>(std::ceil(scales[s] / d))) : 0;
      const int m = dmin > 0.0f ? std::min(15, round_half_even(mins[s] / dmin)) : 0;
      block.scales[s] = static_cast<uint8_t>(sc | (m << 4));
      const float step = d * static_cast<float>(sc);
      const float offset = dmin * static_cast<float>(m);
      for (int j = 0; j < kSub; ++j) {
        const int e = s * kSub + j;
        const int level = step > 0.0f ? std::clamp(round_half_even((src[e] + offset) / step), 0, 3) : 0;
        block.qs[two_bit_byte(e)] = static_cast<uint8_t>(block.qs[two_bit_byte(e)] | (level << two_bit_shift(e)));
      }
    }
  }
}

float vec_dot_q2_K_q8_K(int64_t n, const void* w, const void* a) {
  const auto* wb = static_cast<const BlockQ2_K*>(w);
  const auto* ab = static_cast<const BlockQ8_K*>(a);
  uint8_t q[kQKK];
  float sum = 0.0f;
  for (int64_t b = 0; b < n / kQKK; ++b) {
    unpack_q2_levels(wb[b], q);
    int levels = 0, mins = 0;
    for (int s = 0; s < kSubBlocks; ++s) {
      int sub = 0;
      for (int j = 0; j < kSub; ++j) sub += q[s * kSub + j] * ab[b].qs[s * kSub + j];
      levels += (wb[b].scales[s] & 0x0f) * sub;
      mins += (wb[b].scales[s] >> 4) * ab[b].bsums[s];
    }
    const float d = fp16_to_fp32(wb[b].d) * ab[b].d;
    const float dmin = fp16_to_fp32(wb[b].dmin) * ab[b].d;
    sum += d * static_cast<float>(levels) - dmin * static_cast<float>(mins);
  }
  return sum;
}

// ---- Q3_K: d * (sc - 32) * q, q in [-4, 4)

void q3_K_to_float(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockQ3_K*>(src);
  int8_t q[kQKK];
  uint8_t codes[kSubBlocks];
  for (int64_t b = 0; b < n / kQKK; ++b, dst += kQKK) {
    unpack_q3_levels(blocks[b], q);
    unpack_q3_k_scales(blocks[b].scales, codes);
    const float d = fp16_to_fp32(blocks[b].d);
    for (int s = 0; s < kSubBlocks; ++s) {
      const float step = d * static_cast<float>(codes[s] - 32);
      for (int j = 0; j < kSub; ++j) dst[s * kSub + j] = step * static_cast<float>(q[s * kSub + j]);
    }
  }
}

void q3_K_from_float(const float* src, void* dst, int64_t n) {
  auto* blocks = static_cast<BlockQ3_K*>(dst);
  for (int64_t b = 0; b < n / kQKK; ++b, src += kQKK) {
    BlockQ3_K& block = blocks[b];
    // Each sub-block's extreme maps to level -4 exactly; the scales' extreme to code 0 (-32).
    float scales[kSubBlocks];
    for (int s = 0; s < kSubBlocks; ++s) scales[s] = signed_extreme(src + s * kSub, kSub) / -4.0f;
    block.d = fp32_to_fp16(signed_extreme(scales, kSubBlocks) / -32.0f);
    const float d = fp16_to_fp32(block.d);
    uint8_t codes[kSubBlocks];
    std::memset(block.qs, 0, sizeof(block.qs));
    std::memset(block.hmask, 0, sizeof(block.hmask));
    for (int s = 0; s < kSubBlocks; ++s) {
      const int scale = d != 0.0f ? std::clamp(round_half_even(scales[s] / d), -32, 31) : 0;
      codes[s] = static_cast<uint8_t>(scale + 32);
      const float step = d * static_cast<float>(scale);
      for (int j = 0; j < kSub; ++j) {
        const int e = s * kSub + j;
        const int level = step != 0.0f ? std::clamp(round_half_even(src[e] / step), -4, 3) : 0;
        const int biased = level + 4;  // [0, 8): the low two bits, and whether no 4 is subtracted
        block.qs[two_bit_byte(e)] = static_cast<uint8_t>(block.qs[two_bit_byte(e)] | ((biased & 3) << two_bit_shift(e)));
        if (biased >= 4) block.hmask[e % 32] = static_cast<uint8_t>(block.hmask[e % 32] | (1 << high_bit_index(e)));
      }
    }
    pack_q3_k_scales(codes, block.scales);
  }
}

float vec_dot_q3_K_q8_K(int64_t n, const void* w, const void* a) {
  const auto* wb = static_cast<const BlockQ3_K*>(w);
  const auto* ab = static_cast<const BlockQ8_K*>(a);
  int8_t q[kQKK];
  uint8_t codes[kSubBlocks];
  float sum = 0.0f;
  for (int64_t b = 0; b < n / kQKK; ++b) {
    unpack_q3_levels(wb[b], q);
    unpack_q3_k_scales(wb[b].scales, codes);
    int total = 0;
    for (int s = 0; s < kSubBlocks; ++s) {
      int sub = 0;
      for (int j = 0; j < kSub; ++j) sub += q[s * kSub + j] * ab[b].qs[s * kSub + j];
      total += (codes[s] - 32) * sub;
    }
    sum += fp16_to_fp32(wb[b].d) * ab[b].d * static_cast<float>(total);
  }
  return sum;
}

}  // namespace mnemo::kernels::scalar

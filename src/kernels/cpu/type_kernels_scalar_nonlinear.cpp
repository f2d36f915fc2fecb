// Scalar kernels of the formats whose 4-bit codes index a table of levels (IQ4_NL and IQ4_XS,
// MXFP4) rather than being the levels. Dequantisation and dot products follow ggml's arithmetic;
// each block of a dot product is one exact integer sum before its scale. The weight quantisers
// pick the nearest level under one round-to-nearest scale (ggml searches scales), good enough for
// test models.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/nonlinear_levels.h"
#include "kernels/cpu/scalar_kernels.h"
#include "tensor/quant_blocks.h"
#include "util/fp16.h"

namespace mnemo::kernels::scalar {
namespace {

constexpr int kSubBlocksXs = kQKK / kQK;  // IQ4_XS: 8 sub-blocks of 32

// The code whose level times `scale` is nearest x (the lower code on a tie).
uint8_t nearest_code(const int8_t* levels, float x, float scale) {
  uint8_t best = 0;
  float best_error = INFINITY;
  for (uint8_t c = 0; c < 16; ++c) {
    const float error = std::fabs(x - scale * static_cast<float>(levels[c]));
    if (error < best_error) {
      best = c;
      best_error = error;
    }
  }
  return best;
}

// 32 elements as codes of `levels` under `scale`, nibbles ordered as Q4_0's.
void encode_block(const float* x, const int8_t* levels, float scale, uint8_t* qs) {
  for (int j = 0; j < kQK / 2; ++j) {
    qs[j] = static_cast<uint8_t>(nearest_code(levels, x[j], scale) | (nearest_code(levels, x[j + kQK / 2], scale) << 4));
  }
}

// Sum over a block of 32 of level(code) * a.
int block_dot(const int8_t* levels, const uint8_t* qs, const int8_t* a) {
  int sum = 0;
  for (int j = 0; j < kQK / 2; ++j) {
    sum += levels[qs[j] & 0x0f] * a[j] + levels[qs[j] >> 4] * a[j + kQK / 2];
  }
  return sum;
}

void decode_block(const int8_t* levels, const uint8_t* qs, float scale, float* dst) {
  for (int j = 0; j < kQK / 2; ++j) {
    dst[j] = scale * static_cast<float>(levels[qs[j] & 0x0f]);
    dst[j + kQK / 2] = scale * static_cast<float>(levels[qs[j] >> 4]);
  }
}

float signed_extreme(const float* x, int n) {
  float extreme = 0.0f;
  for (int j = 0; j < n; ++j) {
    if (std::fabs(x[j]) > std::fabs(extreme)) extreme = x[j];
  }
  return extreme;
}

// IQ4_XS sub-block s's scale code (the scale plus 32, 6 bits).
int xs_code(const BlockIQ4_XS& block, int s) {
  return ((block.scales_l[s / 2] >> (4 * (s % 2))) & 0x0f) | (((block.scales_h >> (2 * s)) & 3) << 4);
}

}  // namespace

// ---- IQ4_NL: d * level(code), blocks of 32

void iq4_nl_to_float(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockIQ4_NL*>(src);
  for (int64_t b = 0; b < n / kQK; ++b, dst += kQK) decode_block(kIq4nlLevels, blocks[b].qs, fp16_to_fp32(blocks[b].d), dst);
}

void iq4_nl_from_float(const float* src, void* dst, int64_t n) {
  auto* blocks = static_cast<BlockIQ4_NL*>(dst);
  for (int64_t b = 0; b < n / kQK; ++b, src += kQK) {
    // The block's extreme maps to the lowest level, -127.
    blocks[b].d = fp32_to_fp16(signed_extreme(src, kQK) / -127.0f);
    encode_block(src, kIq4nlLevels, fp16_to_fp32(blocks[b].d), blocks[b].qs);
  }
}

float vec_dot_iq4_nl_q8_0(int64_t n, const void* w, const void* a) {
  const auto* wb = static_cast<const BlockIQ4_NL*>(w);
  const auto* ab = static_cast<const BlockQ8_0*>(a);
  float sum = 0.0f;
  for (int64_t b = 0; b < n / kQK; ++b) {
    const float d = fp16_to_fp32(wb[b].d) * fp16_to_fp32(ab[b].d);
    sum += d * static_cast<float>(block_dot(kIq4nlLevels, wb[b].qs, ab[b].qs));
  }
  return sum;
}

// ---- IQ4_XS: d * (code_s - 32) * level, super-blocks of 256

void iq4_xs_to_float(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockIQ4_XS*>(src);
  for (int64_t b = 0; b < n / kQKK; ++b) {
    const float d = fp16_to_fp32(blocks[b].d);
    for (int s = 0; s < kSubBlocksXs; ++s, dst += kQK) {
      decode_block(kIq4nlLevels, blocks[b].qs + s * kQK / 2, d * static_cast<float>(xs_code(blocks[b], s) - 32), dst);
    }
  }
}

void iq4_xs_from_float(const float* src, void* dst, int64_t n) {
  auto* blocks = static_cast<BlockIQ4_XS*>(dst);
  for (int64_t b = 0; b < n / kQKK; ++b, src += kQKK) {
    BlockIQ4_XS& block = blocks[b];
    float scales[kSubBlocksXs];
    for (int s = 0; s < kSubBlocksXs; ++s) scales[s] = signed_extreme(src + s * kQK, kQK) / -127.0f;
    // The scales' extreme maps to code 0 (-32).
    block.d = fp32_to_fp16(signed_extreme(scales, kSubBlocksXs) / -32.0f);
    const float d = fp16_to_fp32(block.d);
    block.scales_h = 0;
    std::memset(block.scales_l, 0, sizeof(block.scales_l));
    for (int s = 0; s < kSubBlocksXs; ++s) {
      const int scale = d != 0.0f ? std::clamp(static_cast<int>(std::nearbyint(scales[s] / d)), -32, 31) : 0;
      const int code = scale + 32;
      block.scales_l[s / 2] = static_cast<uint8_t>(block.scales_l[s / 2] | ((code & 0x0f) << (4 * (s % 2))));
      block.scales_h = static_cast<uint16_t>(block.scales_h | ((code >> 4) << (2 * s)));
      encode_block(src + s * kQK, kIq4nlLevels, d * static_cast<float>(scale), block.qs + s * kQK / 2);
    }
  }
}

float vec_dot_iq4_xs_q8_K(int64_t n, const void* w, const void* a) {
  const auto* wb = static_cast<const BlockIQ4_XS*>(w);
  const auto* ab = static_cast<const BlockQ8_K*>(a);
  float sum = 0.0f;
  for (int64_t b = 0; b < n / kQKK; ++b) {
    int total = 0;
    for (int s = 0; s < kSubBlocksXs; ++s) {
      total += (xs_code(wb[b], s) - 32) * block_dot(kIq4nlLevels, wb[b].qs + s * kQK / 2, ab[b].qs + s * kQK);
    }
    sum += fp16_to_fp32(wb[b].d) * ab[b].d * static_cast<float>(total);
  }
  return sum;
}

// ---- MXFP4: 2^(e - 128) * level, blocks of 32 (levels doubled, so the scale is halved)

void mxfp4_to_float(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockMXFP4*>(src);
  for (int64_t b = 0; b < n / kQK; ++b, dst += kQK) decode_block(kMxfp4Levels, blocks[b].qs, e8m0_half_to_float(blocks[b].e), dst);
}

void mxfp4_from_float(const float* src, void* dst, int64_t n) {
  auto* blocks = static_cast<BlockMXFP4*>(dst);
  for (int64_t b = 0; b < n / kQK; ++b, src += kQK) {
    float amax = 0.0f;
    for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(src[j]));
    // The OCP scale: 2^(floor(log2(amax)) - 2), 2 being E2M1's largest exponent.
    const int exponent = amax > 0.0f ? static_cast<int>(std::floor(std::log2(amax))) - 2 + 127 : 0;
    blocks[b].e = static_cast<uint8_t>(std::clamp(exponent, 0, 254));
    encode_block(src, kMxfp4Levels, e8m0_half_to_float(blocks[b].e), blocks[b].qs);
  }
}

float vec_dot_mxfp4_q8_0(int64_t n, const void* w, const void* a) {
  const auto* wb = static_cast<const BlockMXFP4*>(w);
  const auto* ab = static_cast<const BlockQ8_0*>(a);
  float sum = 0.0f;
  for (int64_t b = 0; b < n / kQK; ++b) {
    const float d = e8m0_half_to_float(wb[b].e) * fp16_to_fp32(ab[b].d);
    sum += d * static_cast<float>(block_dot(kMxfp4Levels, wb[b].qs, ab[b].qs));
  }
  return sum;
}

}  // namespace mnemo::kernels::scalar

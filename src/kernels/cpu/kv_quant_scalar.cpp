// The reference KV tier conversions (kernels/cpu/kv_quant.h): what every SIMD variant must equal
// bit for bit.
#include <algorithm>
#include <cmath>

#include "kernels/cpu/kv_quant.h"
#include "util/fp16.h"

namespace mnemo::kernels::scalar {
namespace {

// Nibble codes of the asymmetric formats: (x - min) / d rounded, within [0, 15].
int asymmetric_code(float x, float min, float inverse) {
  return std::min(15, static_cast<int>((x - min) * inverse + 0.5f));
}

void q8_0_encode(const uint16_t* src, BlockQ8_0* dst, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b, src += kQK) {
    float amax = 0.0f;
    for (int i = 0; i < kQK; ++i) amax = std::max(amax, std::fabs(fp16_to_fp32(src[i])));
    const float d = amax / 127.0f;
    const float inverse = d != 0.0f ? 1.0f / d : 0.0f;
    dst[b].d = fp32_to_fp16(d);
    for (int i = 0; i < kQK; ++i) dst[b].qs[i] = static_cast<int8_t>(std::nearbyint(fp16_to_fp32(src[i]) * inverse));
  }
}

void q8_0_decode(const BlockQ8_0* src, uint16_t* dst, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b, dst += kQK) {
    const float d = fp16_to_fp32(src[b].d);
    for (int i = 0; i < kQK; ++i) dst[i] = fp32_to_fp16(static_cast<float>(src[b].qs[i]) * d);
  }
}

void q4_0_encode(const uint16_t* src, BlockQ4_0* dst, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b, src += kQK) {
    // The element of largest magnitude maps to -8 exactly (llama.cpp's reference quantiser).
    float amax = 0.0f, max = 0.0f;
    for (int i = 0; i < kQK; ++i) {
      const float x = fp16_to_fp32(src[i]);
      if (std::fabs(x) > amax) {
        amax = std::fabs(x);
        max = x;
      }
    }
    const float d = max / -8.0f;
    const float inverse = d != 0.0f ? 1.0f / d : 0.0f;
    dst[b].d = fp32_to_fp16(d);
    for (int i = 0; i < kQK / 2; ++i) {
      const int lo = std::min(15, static_cast<int>(fp16_to_fp32(src[i]) * inverse + 8.5f));
      const int hi = std::min(15, static_cast<int>(fp16_to_fp32(src[i + kQK / 2]) * inverse + 8.5f));
      dst[b].qs[i] = static_cast<uint8_t>(lo | (hi << 4));
    }
  }
}

void q4_0_decode(const BlockQ4_0* src, uint16_t* dst, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b, dst += kQK) {
    const float d = fp16_to_fp32(src[b].d);
    for (int i = 0; i < kQK / 2; ++i) {
      dst[i] = fp32_to_fp16(static_cast<float>((src[b].qs[i] & 0x0f) - 8) * d);
      dst[i + kQK / 2] = fp32_to_fp16(static_cast<float>((src[b].qs[i] >> 4) - 8) * d);
    }
  }
}

void q4_1_encode(const uint16_t* src, BlockQ4_1* dst, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b, src += kQK) {
    float min = fp16_to_fp32(src[0]), max = min;
    for (int i = 1; i < kQK; ++i) {
      min = std::min(min, fp16_to_fp32(src[i]));
      max = std::max(max, fp16_to_fp32(src[i]));
    }
    min += 0.0f;  // a minimum of -0 and +0 is either, by order; both become +0
    max += 0.0f;
    const float d = (max - min) / 15.0f;
    const float inverse = d != 0.0f ? 1.0f / d : 0.0f;
    dst[b].d = fp32_to_fp16(d);
    dst[b].m = fp32_to_fp16(min);
    for (int i = 0; i < kQK / 2; ++i) {
      const int lo = asymmetric_code(fp16_to_fp32(src[i]), min, inverse);
      const int hi = asymmetric_code(fp16_to_fp32(src[i + kQK / 2]), min, inverse);
      dst[b].qs[i] = static_cast<uint8_t>(lo | (hi << 4));
    }
  }
}

void q4_1_decode(const BlockQ4_1* src, uint16_t* dst, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b, dst += kQK) {
    const float d = fp16_to_fp32(src[b].d), m = fp16_to_fp32(src[b].m);
    for (int i = 0; i < kQK / 2; ++i) {
      dst[i] = fp32_to_fp16(static_cast<float>(src[b].qs[i] & 0x0f) * d + m);
      dst[i + kQK / 2] = fp32_to_fp16(static_cast<float>(src[b].qs[i] >> 4) * d + m);
    }
  }
}

void channel_q4_encode(const uint16_t* src, uint8_t* dst, int32_t rows, int32_t dim) {
  auto* scales = reinterpret_cast<uint16_t*>(dst);
  uint16_t* mins = scales + dim;
  uint8_t* codes = dst + static_cast<size_t>(dim) * 4;
  for (int32_t c = 0; c < dim; ++c) {
    float min = fp16_to_fp32(src[c]), max = min;
    for (int32_t r = 1; r < rows; ++r) {
      min = std::min(min, fp16_to_fp32(src[static_cast<size_t>(r) * dim + c]));
      max = std::max(max, fp16_to_fp32(src[static_cast<size_t>(r) * dim + c]));
    }
    min += 0.0f;
    max += 0.0f;
    const float d = (max - min) / 15.0f;
    const float inverse = d != 0.0f ? 1.0f / d : 0.0f;
    scales[c] = fp32_to_fp16(d);
    mins[c] = fp32_to_fp16(min);
    for (int32_t r = 0; r < rows; r += 2) {
      const int lo = asymmetric_code(fp16_to_fp32(src[static_cast<size_t>(r) * dim + c]), min, inverse);
      const int hi = asymmetric_code(fp16_to_fp32(src[static_cast<size_t>(r + 1) * dim + c]), min, inverse);
      codes[static_cast<size_t>(r / 2) * dim + c] = static_cast<uint8_t>(lo | (hi << 4));
    }
  }
}

void channel_q4_decode(const uint8_t* src, uint16_t* dst, int32_t rows, int32_t dim) {
  const auto* scales = reinterpret_cast<const uint16_t*>(src);
  const uint16_t* mins = scales + dim;
  const uint8_t* codes = src + static_cast<size_t>(dim) * 4;
  for (int32_t r = 0; r < rows; r += 2) {
    for (int32_t c = 0; c < dim; ++c) {
      const float d = fp16_to_fp32(scales[c]), m = fp16_to_fp32(mins[c]);
      const uint8_t byte = codes[static_cast<size_t>(r / 2) * dim + c];
      dst[static_cast<size_t>(r) * dim + c] = fp32_to_fp16(static_cast<float>(byte & 0x0f) * d + m);
      dst[static_cast<size_t>(r + 1) * dim + c] = fp32_to_fp16(static_cast<float>(byte >> 4) * d + m);
    }
  }
}

}  // namespace

const KvQuantKernels kKvQuant = {q8_0_encode, q8_0_decode, q4_0_encode, q4_0_decode,
                                 q4_1_encode, q4_1_decode, channel_q4_encode, channel_q4_decode};

}  // namespace mnemo::kernels::scalar

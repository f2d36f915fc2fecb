// Blocks packed by hand, with the expected values worked out by hand from the format definitions
// (not from the code under test), dequantised by every ISA's kernels.
#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <random>
#include <vector>

#include "kernel_test_util.h"
#include "kernels/cpu/k_scales.h"

namespace mnemo::kernels {
namespace {

constexpr uint16_t kHalfOne = 0x3c00;   // 1.0
constexpr uint16_t kHalfHalf = 0x3800;  // 0.5
constexpr uint16_t kHalfTwo = 0x4000;   // 2.0
constexpr uint16_t kHalfMinusOne = 0xbc00;

std::vector<float> dequantise(DType type, const void* data, int64_t n, Isa isa) {
  std::vector<float> out(static_cast<size_t>(n));
  type_kernels(type, isa)->to_float(data, out.data(), n);
  return out;
}

class KnownValues : public ::testing::TestWithParam<Isa> {};

TEST_P(KnownValues, Q8_0) {
  BlockQ8_0 block{};
  block.d = kHalfHalf;
  for (int j = 0; j < kQK; ++j) block.qs[j] = static_cast<int8_t>(j * 8 - 127);  // -127, -119, ..., 121
  const std::vector<float> x = dequantise(DType::Q8_0, &block, kQK, GetParam());
  EXPECT_EQ(x[0], -63.5f);
  EXPECT_EQ(x[1], -59.5f);
  EXPECT_EQ(x[16], 0.5f);
  EXPECT_EQ(x[31], 60.5f);
}

TEST_P(KnownValues, Q4_0) {
  BlockQ4_0 block{};
  block.d = kHalfTwo;
  for (int j = 0; j < 16; ++j) block.qs[j] = static_cast<uint8_t>((j << 4) | (15 - j));
  // element j: low nibble 15 - j; element j + 16: high nibble j; value 2 * (q - 8)
  const std::vector<float> x = dequantise(DType::Q4_0, &block, kQK, GetParam());
  EXPECT_EQ(x[0], 14.0f);    // q = 15
  EXPECT_EQ(x[15], -16.0f);  // q = 0
  EXPECT_EQ(x[16], -16.0f);  // q = 0
  EXPECT_EQ(x[31], 14.0f);   // q = 15
  EXPECT_EQ(x[24], 0.0f);    // q = 8
}

TEST_P(KnownValues, Q4_1) {
  BlockQ4_1 block{};
  block.d = kHalfHalf;
  block.m = kHalfMinusOne;
  std::memset(block.qs, 0x3a, sizeof(block.qs));  // low nibble 10, high nibble 3
  const std::vector<float> x = dequantise(DType::Q4_1, &block, kQK, GetParam());
  EXPECT_EQ(x[0], 4.0f);    // 0.5 * 10 - 1
  EXPECT_EQ(x[20], 0.5f);   // 0.5 * 3 - 1
}

TEST_P(KnownValues, Q5_0FifthBits) {
  BlockQ5_0 block{};
  block.d = kHalfOne;
  std::memset(block.qs, 0x00, sizeof(block.qs));
  block.qs[3] = 0x7f;  // element 3: low nibble 15; element 19: high nibble 7
  // qh bits (little-endian u32): bit 3 -> element 3, bit 19 -> element 19, bit 31 -> element 31
  const uint32_t bits = (1u << 3) | (1u << 19) | (1u << 31);
  std::memcpy(block.qh, &bits, sizeof(bits));
  const std::vector<float> x = dequantise(DType::Q5_0, &block, kQK, GetParam());
  EXPECT_EQ(x[3], 15.0f);   // 0x1f - 16
  EXPECT_EQ(x[19], 7.0f);   // 0x17 - 16
  EXPECT_EQ(x[31], 0.0f);   // 0x10 - 16
  EXPECT_EQ(x[0], -16.0f);  // 0x00 - 16
  EXPECT_EQ(x[16], -16.0f);
}

TEST_P(KnownValues, Q5_1FifthBits) {
  BlockQ5_1 block{};
  block.d = kHalfHalf;
  block.m = kHalfOne;
  std::memset(block.qs, 0x00, sizeof(block.qs));
  block.qs[0] = 0x21;  // element 0: 1, element 16: 2
  const uint32_t bits = (1u << 0) | (1u << 17);
  std::memcpy(block.qh, &bits, sizeof(bits));
  const std::vector<float> x = dequantise(DType::Q5_1, &block, kQK, GetParam());
  EXPECT_EQ(x[0], 9.5f);    // 0.5 * 17 + 1
  EXPECT_EQ(x[16], 2.0f);   // 0.5 * 2 + 1
  EXPECT_EQ(x[17], 9.0f);   // 0.5 * 16 + 1
}

// Packed bytes and the scales/mins they hold, decoded by hand:
//   scales 0-3 = bytes 0-3 & 63 = 1, 2, 3, 4;   mins 0-3 = bytes 4-7 & 63 = 5, 6, 7, 8
//   scale 4 = (0x9a & 15) | (0xc1 >> 6) << 4 = 0x0a | 0x30 = 58   min 4 = 0x9a >> 4 | (0x05 >> 6) << 4 = 9
//   scale 5 = (0x0b & 15) | (0x02 >> 6) << 4 = 11                 min 5 = 0x0 | (0x86 >> 6) << 4 = 32
//   scale 6 = (0x3c & 15) | (0x43 >> 6) << 4 = 0x0c | 0x10 = 28   min 6 = 0x3 | (0x07 >> 6) << 4 = 3
//   scale 7 = (0xfd & 15) | (0x04 >> 6) << 4 = 13                 min 7 = 0xf | (0xc8 >> 6) << 4 = 63
constexpr std::array<uint8_t, 12> kPackedScales = {0xc1, 0x02, 0x43, 0x04, 0x05, 0x86,
                                                   0x07, 0xc8, 0x9a, 0x0b, 0x3c, 0xfd};
constexpr std::array<uint8_t, 8> kScales = {1, 2, 3, 4, 58, 11, 28, 13};
constexpr std::array<uint8_t, 8> kMins = {5, 6, 7, 8, 9, 32, 3, 63};

TEST(KernelsKScales, UnpackHandPackedBytes) {
  uint8_t scales[8], mins[8];
  unpack_k_scales(kPackedScales.data(), scales, mins);
  for (int j = 0; j < 8; ++j) {
    EXPECT_EQ(scales[j], kScales[static_cast<size_t>(j)]) << j;
    EXPECT_EQ(mins[j], kMins[static_cast<size_t>(j)]) << j;
  }
  uint8_t repacked[12];
  pack_k_scales(kScales.data(), kMins.data(), repacked);
  EXPECT_EQ(0, std::memcmp(repacked, kPackedScales.data(), 12));
}

TEST(KernelsKScales, WordUnpackingMatchesByteUnpacking) {
  uint64_t scale_word, min_word;
  unpack_k_scales_words(kPackedScales.data(), scale_word, min_word);
  for (int j = 0; j < 8; ++j) {
    EXPECT_EQ((scale_word >> (8 * j)) & 0xff, kScales[static_cast<size_t>(j)]) << j;
    EXPECT_EQ((min_word >> (8 * j)) & 0xff, kMins[static_cast<size_t>(j)]) << j;
  }
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> byte(0, 255);
  for (int trial = 0; trial < 1000; ++trial) {
    uint8_t packed[12], scales[8], mins[8];
    for (uint8_t& b : packed) b = static_cast<uint8_t>(byte(rng));
    unpack_k_scales(packed, scales, mins);
    unpack_k_scales_words(packed, scale_word, min_word);
    for (int j = 0; j < 8; ++j) {
      ASSERT_EQ((scale_word >> (8 * j)) & 0xff, scales[j]);
      ASSERT_EQ((min_word >> (8 * j)) & 0xff, mins[j]);
    }
  }
}

TEST_P(KnownValues, Q4_K) {
  BlockQ4_K block{};
  block.d = kHalfOne;
  block.dmin = kHalfOne;
  std::memcpy(block.scales, kPackedScales.data(), 12);
  std::memset(block.qs, 0x21, sizeof(block.qs));  // low nibbles 1, high nibbles 2
  // Sub-block s (32 elements) = chunk s / 2, low nibbles if s is even: value scale * q - min.
  const float expected[8] = {1 * 1 - 5, 2 * 2 - 6, 3 * 1 - 7, 4 * 2 - 8, 58 * 1 - 9, 11 * 2 - 32, 28 * 1 - 3, 13 * 2 - 63};
  const std::vector<float> x = dequantise(DType::Q4_K, &block, kQKK, GetParam());
  for (int e = 0; e < kQKK; ++e) ASSERT_EQ(x[static_cast<size_t>(e)], expected[e / 32]) << e;
}

TEST_P(KnownValues, Q5_K) {
  BlockQ5_K block{};
  block.d = kHalfHalf;
  block.dmin = kHalfOne;
  std::memcpy(block.scales, kPackedScales.data(), 12);
  std::memset(block.qs, 0x00, sizeof(block.qs));
  std::memset(block.qh, 0x00, sizeof(block.qh));
  block.qs[32 * 2 + 5] = 0x3c;  // chunk 2, l = 5: element 133 low nibble 12, element 165 high nibble 3
  block.qh[5] = 1 << 5;         // bit 2c + 1 = 5: the fifth bit of element 165 (chunk 2, high half)
  const std::vector<float> x = dequantise(DType::Q5_K, &block, kQKK, GetParam());
  EXPECT_EQ(x[133], 0.5f * 58 * 12 - 9);         // sub-block 4
  EXPECT_EQ(x[165], 0.5f * 11 * (16 + 3) - 32);  // sub-block 5
  EXPECT_EQ(x[0], -5.0f);                        // q = 0: -min
}

TEST_P(KnownValues, Q6_K) {
  BlockQ6_K block{};
  block.d = kHalfHalf;
  for (int s = 0; s < 16; ++s) block.scales[s] = static_cast<int8_t>(s - 8);
  std::memset(block.ql, 0, sizeof(block.ql));
  std::memset(block.qh, 0, sizeof(block.qh));
  // Element 70 = half 0, group 2 (elements 64-95), l = 6: high nibble of ql[6], bits 4-5 of qh[6].
  block.ql[6] = 0xa0;
  block.qh[6] = 0x20;  // bits 4-5 = 2 -> level 10 | 2 << 4 = 42
  // Element 255 = half 1, group 3, l = 31: high nibble of ql[64 + 32 + 31], bits 6-7 of qh[32 + 31].
  block.ql[127] = 0xf0;
  block.qh[63] = 0xc0;  // level 15 | 3 << 4 = 63
  // Element 161 = half 1, group 1, l = 1: low nibble of ql[64 + 32 + 1], bits 2-3 of qh[32 + 1].
  block.ql[97] = 0x05;
  block.qh[33] = 0x04;  // level 5 | 1 << 4 = 21
  const std::vector<float> x = dequantise(DType::Q6_K, &block, kQKK, GetParam());
  EXPECT_EQ(x[70], 0.5f * (4 - 8) * (42 - 32));     // sub-block 70 / 16 = 4
  EXPECT_EQ(x[255], 0.5f * (15 - 8) * (63 - 32));   // sub-block 15
  EXPECT_EQ(x[161], 0.5f * (10 - 8) * (21 - 32));   // sub-block 10
  EXPECT_EQ(x[6], 0.5f * (0 - 8) * (0 - 32));       // level 0, sub-block 0
  EXPECT_EQ(x[38], 0.5f * (2 - 8) * (0 - 32));      // ql[38]/qh[6] bits 2-3 are untouched
}

TEST_P(KnownValues, Q2_K) {
  BlockQ2_K block{};
  block.d = kHalfHalf;
  block.dmin = kHalfOne;
  for (int s = 0; s < 16; ++s) block.scales[s] = static_cast<uint8_t>((s % 16) | ((15 - s) << 4));  // sc = s, m = 15 - s
  std::memset(block.qs, 0, sizeof(block.qs));
  // Element 200 = half 1, run j = 2 (elements 192-223), l = 8: bits 4-5 of qs[32 + 8].
  block.qs[40] = 3 << 4;
  // Element 31 = half 0, run 0, l = 31: bits 0-1 of qs[31].
  block.qs[31] = 2;
  // Element 63 = half 0, run 1, l = 31: bits 2-3 of qs[31].
  block.qs[31] |= 1 << 2;
  const std::vector<float> x = dequantise(DType::Q2_K, &block, kQKK, GetParam());
  EXPECT_EQ(x[200], 0.5f * 12 * 3 - (15 - 12));  // sub-block 12
  EXPECT_EQ(x[31], 0.5f * 1 * 2 - 14);           // sub-block 1
  EXPECT_EQ(x[63], 0.5f * 3 * 1 - 12);           // sub-block 3
  EXPECT_EQ(x[0], -15.0f);                       // q = 0, sub-block 0: -m
  EXPECT_EQ(x[255], 0.0f);                       // sub-block 15: m = 0
}

TEST_P(KnownValues, Q3_K) {
  BlockQ3_K block{};
  block.d = kHalfHalf;
  // Codes: sub-block s has code 32 + s - 8 (scale s - 8), packed by hand: low nibbles of codes
  // 0-7 in bytes 0-7's low nibbles, of codes 8-15 in their high nibbles; top two bits of code s
  // in byte 8 + s % 4, bits 2 * (s / 4).
  uint8_t codes[16];
  for (int s = 0; s < 16; ++s) codes[s] = static_cast<uint8_t>(24 + s);
  std::memset(block.scales, 0, sizeof(block.scales));
  for (int s = 0; s < 16; ++s) {
    block.scales[s % 8] |= static_cast<uint8_t>((codes[s] & 15) << (4 * (s / 8)));
    block.scales[8 + s % 4] |= static_cast<uint8_t>((codes[s] >> 4) << (2 * (s / 4)));
  }
  std::memset(block.qs, 0, sizeof(block.qs));
  std::memset(block.hmask, 0xff, sizeof(block.hmask));  // every third bit set: q = low bits
  // Element 150 = half 1, run 0, l = 22: bits 0-1 of qs[32 + 22], bit 4 of hmask[22].
  block.qs[54] = 3;
  block.hmask[22] = static_cast<uint8_t>(~(1 << 4));  // clear: q = 3 - 4
  // Element 97 = half 0, run 3, l = 1: bits 6-7 of qs[1], bit 3 of hmask[1].
  block.qs[1] = 2 << 6;
  const std::vector<float> x = dequantise(DType::Q3_K, &block, kQKK, GetParam());
  EXPECT_EQ(x[150], 0.5f * (9 - 8) * (3 - 4));  // sub-block 9
  EXPECT_EQ(x[97], 0.5f * (6 - 8) * 2);         // sub-block 6
  EXPECT_EQ(x[118], 0.0f);                      // hmask[22] bit 3 set, low bits 0: q = 0
  EXPECT_EQ(x[22], 0.0f);                       // bit 0 of hmask[22] set: q = 0
  EXPECT_EQ(x[182], 0.0f);                      // half 1, run 1, l = 22: bits 2-3 of qs[54] clear, bit 5 of hmask[22] set
}

TEST_P(KnownValues, IQ4_NL) {
  BlockIQ4_NL block{};
  block.d = kHalfHalf;
  for (int j = 0; j < 16; ++j) block.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  const std::vector<float> x = dequantise(DType::IQ4_NL, &block, kQK, GetParam());
  EXPECT_EQ(x[0], -63.5f);   // code 0: -127
  EXPECT_EQ(x[8], 0.5f);     // code 8: 1
  EXPECT_EQ(x[15], 56.5f);   // code 15: 113
  EXPECT_EQ(x[16], 56.5f);   // high nibble of qs[0]: code 15
  EXPECT_EQ(x[31], -63.5f);  // high nibble of qs[15]: code 0
  EXPECT_EQ(x[20], 19.0f);   // high nibble of qs[4]: code 11, 38
}

TEST_P(KnownValues, IQ4_XS) {
  BlockIQ4_XS block{};
  block.d = kHalfTwo;
  // Sub-block s has code 32 + s - 3 (scale s - 3): low nibbles in scales_l, top bits in scales_h.
  block.scales_h = 0;
  std::memset(block.scales_l, 0, sizeof(block.scales_l));
  for (int s = 0; s < 8; ++s) {
    const int code = 29 + s;
    block.scales_l[s / 2] |= static_cast<uint8_t>((code & 15) << (4 * (s % 2)));
    block.scales_h = static_cast<uint16_t>(block.scales_h | ((code >> 4) << (2 * s)));
  }
  std::memset(block.qs, 0x98, sizeof(block.qs));  // low nibbles code 8 (1), high nibbles 9 (13)
  block.qs[16 * 5 + 3] = 0x0f;                     // sub-block 5: element 3 code 15 (113), 19 code 0 (-127)
  const std::vector<float> x = dequantise(DType::IQ4_XS, &block, kQKK, GetParam());
  EXPECT_EQ(x[0], 2.0f * -3 * 1);            // sub-block 0
  EXPECT_EQ(x[16], 2.0f * -3 * 13);
  EXPECT_EQ(x[5 * 32 + 3], 2.0f * 2 * 113);  // sub-block 5
  EXPECT_EQ(x[5 * 32 + 19], 2.0f * 2 * -127);
  EXPECT_EQ(x[255], 2.0f * 4 * 13);          // sub-block 7
  EXPECT_EQ(x[3 * 32], 0.0f);                // sub-block 3: scale 0
}

TEST_P(KnownValues, MXFP4) {
  BlockMXFP4 blocks[3]{};
  blocks[0].e = 127;  // 2^0, halved: 0.5
  blocks[1].e = 130;  // 2^3, halved: 4
  blocks[2].e = 1;    // 2^-126, halved: 2^-127 (a subnormal)
  for (auto& block : blocks) {
    for (int j = 0; j < 16; ++j) block.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  }
  const std::vector<float> x = dequantise(DType::MXFP4, blocks, 3 * kQK, GetParam());
  EXPECT_EQ(x[7], 6.0f);      // code 7: E2M1 6.0 (12 halved)
  EXPECT_EQ(x[15], -6.0f);    // code 15: -6.0
  EXPECT_EQ(x[3], 1.5f);      // code 3: 1.5
  EXPECT_EQ(x[16], -6.0f);    // high nibble of qs[0]: code 15
  EXPECT_EQ(x[8], 0.0f);      // code 8: -0
  EXPECT_EQ(x[32 + 5], 4.0f * 6);  // code 5: 3.0 at scale 8
  EXPECT_EQ(x[64 + 1], 0x1p-127f);  // code 1: 0.5 at scale 2^-126
}

TEST_P(KnownValues, Q8_K) {
  std::vector<float> values(kQKK, 0.0f);
  values[0] = 1.0f;
  values[1] = -2.0f;  // the extreme: scale = -127 / -2 = 63.5
  values[2] = 0.5f;   // 31.75 -> 32
  values[17] = 1.5f;  // 95.25 -> 95
  BlockQ8_K block{};
  type_kernels(DType::Q8_K, GetParam())->quantize_activations(values.data(), &block, kQKK);
  EXPECT_EQ(block.qs[0], 64);  // 63.5 rounds half to even
  EXPECT_EQ(block.qs[1], -127);
  EXPECT_EQ(block.qs[2], 32);
  EXPECT_EQ(block.qs[17], 95);
  EXPECT_EQ(block.d, 1.0f / 63.5f);
  EXPECT_EQ(block.bsums[0], 64 - 127 + 32);
  EXPECT_EQ(block.bsums[1], 95);
  EXPECT_EQ(block.bsums[2], 0);

  values[1] = 2.0f;  // a positive extreme flips the sign of the scale
  type_kernels(DType::Q8_K, GetParam())->quantize_activations(values.data(), &block, kQKK);
  EXPECT_EQ(block.qs[1], -127);
  EXPECT_EQ(block.qs[0], -64);
  EXPECT_EQ(block.d, -1.0f / 63.5f);
  const std::vector<float> x = dequantise(DType::Q8_K, &block, kQKK, GetParam());
  EXPECT_FLOAT_EQ(x[1], 2.0f);
  EXPECT_FLOAT_EQ(x[0], 64.0f / 63.5f);
}

// The reference Q8_0 quantiser rounds half away from zero (roundf of x / (amax / 127)); the
// activation quantiser of the SIMD ISAs rounds half to even, as ggml's SIMD code does.
TEST_P(KnownValues, Q8_0Rounding) {
  std::vector<float> values(kQK, 0.0f);
  values[0] = 127.0f;  // d = 1
  values[1] = 2.5f;
  values[2] = -3.5f;
  values[3] = 0.49f;
  BlockQ8_0 block{};
  type_kernels(DType::Q8_0, GetParam())->from_float(values.data(), &block, kQK);
  EXPECT_EQ(block.d, kHalfOne);
  EXPECT_EQ(block.qs[0], 127);
  EXPECT_EQ(block.qs[1], 3);
  EXPECT_EQ(block.qs[2], -4);
  EXPECT_EQ(block.qs[3], 0);
  type_kernels(DType::Q8_0, GetParam())->quantize_activations(values.data(), &block, kQK);
  const bool simd = GetParam() != Isa::kScalar;
  EXPECT_EQ(block.qs[1], simd ? 2 : 3);
  EXPECT_EQ(block.qs[2], -4);
}

TEST_P(KnownValues, HalfAndBfloat) {
  const uint16_t halves[3] = {kHalfOne, 0xc500, 0x0001};  // 1, -5, smallest subnormal
  const std::vector<float> h = dequantise(DType::F16, halves, 3, GetParam());
  EXPECT_EQ(h[0], 1.0f);
  EXPECT_EQ(h[1], -5.0f);
  EXPECT_EQ(h[2], 5.9604644775390625e-8f);
  const uint16_t bfloats[2] = {0x3f80, 0xc0a0};  // 1, -5
  const std::vector<float> b = dequantise(DType::BF16, bfloats, 2, GetParam());
  EXPECT_EQ(b[0], 1.0f);
  EXPECT_EQ(b[1], -5.0f);

  // 1 + 2^-11 is halfway between two halves: ties go to even (1.0); bf16 likewise at 1 + 2^-8.
  // Sixteen of each, so that the SIMD loops (not only their scalar tails) see them.
  const std::vector<float> half_ties(16, 1.0f + 0x1p-11f);
  const std::vector<float> bf16_ties(16, 1.0f + 0x1p-8f);
  std::vector<uint16_t> out(16);
  type_kernels(DType::F16, GetParam())->from_float(half_ties.data(), out.data(), 16);
  EXPECT_EQ(out, std::vector<uint16_t>(16, kHalfOne));
  type_kernels(DType::BF16, GetParam())->from_float(bf16_ties.data(), out.data(), 16);
  EXPECT_EQ(out, std::vector<uint16_t>(16, 0x3f80));
}

INSTANTIATE_TEST_SUITE_P(Kernels, KnownValues, ::testing::ValuesIn(testing::supported_isas()),
                         [](const auto& test_info) { return std::string(isa_name(test_info.param)); });

}  // namespace
}  // namespace mnemo::kernels

// The KV tier conversions (kernels/cpu/kv_quant.h): the AVX2 variant equals the scalar reference
// bit for bit on random KV-like planes, including the edge cases the reference settles (constant
// groups, zeros of both signs, ties of magnitude); the reference decodes within each format's
// error bound; hand-computed blocks pin the byte layouts.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/kv_quant.h"
#include "util/fp16.h"

namespace mnemo::kernels {
namespace {

// KV-like values: mostly small, a few channels with outliers (keys have them per channel).
std::vector<uint16_t> random_plane(int32_t rows, int32_t dim, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> channel_scale(static_cast<size_t>(dim));
  for (float& s : channel_scale) s = std::uniform_real_distribution<float>(0.1f, 1.0f)(rng) * (rng() % 8 == 0 ? 20.0f : 1.0f);
  std::vector<uint16_t> plane(static_cast<size_t>(rows) * static_cast<size_t>(dim));
  for (int32_t r = 0; r < rows; ++r) {
    for (int32_t c = 0; c < dim; ++c) plane[static_cast<size_t>(r) * dim + c] = fp32_to_fp16(normal(rng) * channel_scale[c]);
  }
  return plane;
}

// Groups the references treat specially, written into the first blocks of `plane`.
void add_edge_cases(std::vector<uint16_t>& plane) {
  ASSERT_GE(plane.size(), 5u * 32);
  std::fill(plane.begin(), plane.begin() + 32, fp32_to_fp16(0.0f));                   // all zero
  for (size_t i = 32; i < 64; ++i) plane[i] = fp32_to_fp16(i % 2 ? -0.0f : 0.0f);      // zeros of both signs
  std::fill(plane.begin() + 64, plane.begin() + 96, fp32_to_fp16(1.5f));                // constant
  for (size_t i = 96; i < 128; ++i) plane[i] = fp32_to_fp16(i % 3 == 0 ? 3.0f : -3.0f); // magnitude ties of both signs
  for (size_t i = 128; i < 160; ++i) plane[i] = fp32_to_fp16(static_cast<float>(i) * 1e-6f);  // subnormal scales
}

bool has_simd() { return isa_supported(Isa::kAvx2); }

TEST(KvQuant, Avx2EqualsTheScalarReferenceBitForBit) {
  if (!has_simd()) GTEST_FAIL() << "this machine has no AVX2; CI's machines do";
  const KvQuantKernels& ref = kv_quant_kernels(Isa::kScalar);
  const KvQuantKernels& simd = kv_quant_kernels(Isa::kAvx2);
  std::mt19937 rng(7);
  for (const auto& [rows, dim] : {std::pair{16, 64}, std::pair{16, 256}, std::pair{2, 8}, std::pair{32, 128}}) {
    for (int trial = 0; trial < 20; ++trial) {
      std::vector<uint16_t> plane = random_plane(rows, dim, rng);
      if (trial == 0 && plane.size() >= 160) add_edge_cases(plane);
      const auto n = static_cast<int64_t>(plane.size());
      const auto blocks = static_cast<size_t>(n / kQK);
      // The 32-element formats need a whole block (a 2 x 8 plane is only a channel plane).
      if (blocks > 0) {
        {
          std::vector<BlockQ8_0> a(blocks), b(blocks);
          ref.q8_0_encode(plane.data(), a.data(), n);
          simd.q8_0_encode(plane.data(), b.data(), n);
          ASSERT_EQ(0, std::memcmp(a.data(), b.data(), blocks * sizeof(BlockQ8_0))) << "q8_0 encode " << rows << "x" << dim;
          std::vector<uint16_t> x(plane.size()), y(plane.size());
          ref.q8_0_decode(a.data(), x.data(), n);
          simd.q8_0_decode(a.data(), y.data(), n);
          ASSERT_EQ(x, y) << "q8_0 decode";
        }
        {
          std::vector<BlockQ4_0> a(blocks), b(blocks);
          ref.q4_0_encode(plane.data(), a.data(), n);
          simd.q4_0_encode(plane.data(), b.data(), n);
          ASSERT_EQ(0, std::memcmp(a.data(), b.data(), blocks * sizeof(BlockQ4_0))) << "q4_0 encode";
          std::vector<uint16_t> x(plane.size()), y(plane.size());
          ref.q4_0_decode(a.data(), x.data(), n);
          simd.q4_0_decode(a.data(), y.data(), n);
          ASSERT_EQ(x, y) << "q4_0 decode";
        }
        {
          std::vector<BlockQ4_1> a(blocks), b(blocks);
          ref.q4_1_encode(plane.data(), a.data(), n);
          simd.q4_1_encode(plane.data(), b.data(), n);
          ASSERT_EQ(0, std::memcmp(a.data(), b.data(), blocks * sizeof(BlockQ4_1))) << "q4_1 encode";
          std::vector<uint16_t> x(plane.size()), y(plane.size());
          ref.q4_1_decode(a.data(), x.data(), n);
          simd.q4_1_decode(a.data(), y.data(), n);
          ASSERT_EQ(x, y) << "q4_1 decode";
        }
      }
      {
        std::vector<uint8_t> a(channel_q4_bytes(rows, dim)), b(a.size());
        ref.channel_q4_encode(plane.data(), a.data(), rows, dim);
        simd.channel_q4_encode(plane.data(), b.data(), rows, dim);
        ASSERT_EQ(a, b) << "channel q4 encode " << rows << "x" << dim;
        std::vector<uint16_t> x(plane.size()), y(plane.size());
        ref.channel_q4_decode(a.data(), x.data(), rows, dim);
        simd.channel_q4_decode(a.data(), y.data(), rows, dim);
        ASSERT_EQ(x, y) << "channel q4 decode";
      }
    }
  }
}

// Half a quantisation step, plus the F16 roundings of the scale and the result.
void expect_within_step(const std::vector<uint16_t>& in, const std::vector<uint16_t>& out, size_t group,
                        float levels, const char* what) {
  for (size_t g = 0; g < in.size() / group; ++g) {
    float lo = INFINITY, hi = -INFINITY;
    for (size_t i = 0; i < group; ++i) {
      lo = std::min(lo, fp16_to_fp32(in[g * group + i]));
      hi = std::max(hi, fp16_to_fp32(in[g * group + i]));
    }
    const float step = (hi - lo) / levels;
    for (size_t i = 0; i < group; ++i) {
      const float x = fp16_to_fp32(in[g * group + i]), y = fp16_to_fp32(out[g * group + i]);
      ASSERT_LE(std::fabs(x - y), 0.5f * step * 1.01f + std::fabs(x) * 2e-3f + 1e-6f) << what << " group " << g << " element " << i;
    }
  }
}

TEST(KvQuant, RoundTripsStayWithinHalfAStep) {
  const KvQuantKernels& k = kv_quant_kernels();
  std::mt19937 rng(11);
  const int32_t rows = 16, dim = 64;
  const std::vector<uint16_t> plane = random_plane(rows, dim, rng);
  const auto n = static_cast<int64_t>(plane.size());
  std::vector<uint16_t> out(plane.size());
  std::vector<BlockQ8_0> q8(static_cast<size_t>(n / kQK));
  k.q8_0_encode(plane.data(), q8.data(), n);
  k.q8_0_decode(q8.data(), out.data(), n);
  // Symmetric over [-amax, amax]: 254 steps of the full range.
  expect_within_step(plane, out, 32, 127.0f, "q8_0");
  std::vector<BlockQ4_1> q41(static_cast<size_t>(n / kQK));
  k.q4_1_encode(plane.data(), q41.data(), n);
  k.q4_1_decode(q41.data(), out.data(), n);
  expect_within_step(plane, out, 32, 15.0f, "q4_1");
  std::vector<BlockQ4_0> q40(static_cast<size_t>(n / kQK));
  k.q4_0_encode(plane.data(), q40.data(), n);
  k.q4_0_decode(q40.data(), out.data(), n);
  expect_within_step(plane, out, 32, 8.0f, "q4_0");  // 16 levels over [-amax, amax]: steps of amax / 8
  // Per channel: the error of each column is bounded by its own range, which the outlier
  // channels would blow up for a per-row grouping.
  std::vector<uint8_t> channel(channel_q4_bytes(rows, dim));
  k.channel_q4_encode(plane.data(), channel.data(), rows, dim);
  k.channel_q4_decode(channel.data(), out.data(), rows, dim);
  std::vector<uint16_t> columns_in, columns_out;
  for (int32_t c = 0; c < dim; ++c) {
    for (int32_t r = 0; r < rows; ++r) {
      columns_in.push_back(plane[static_cast<size_t>(r) * dim + c]);
      columns_out.push_back(out[static_cast<size_t>(r) * dim + c]);
    }
  }
  expect_within_step(columns_in, columns_out, static_cast<size_t>(rows), 15.0f, "channel q4");
}

TEST(KvQuant, HandComputedBlocksPinTheLayouts) {
  const KvQuantKernels& k = kv_quant_kernels(Isa::kScalar);
  std::vector<uint16_t> x(32);
  for (int i = 0; i < 32; ++i) x[static_cast<size_t>(i)] = fp32_to_fp16(static_cast<float>(i - 16));  // -16 .. 15
  BlockQ8_0 q8;
  k.q8_0_encode(x.data(), &q8, 32);
  EXPECT_EQ(fp16_to_fp32(q8.d), fp16_to_fp32(fp32_to_fp16(16.0f / 127.0f)));
  EXPECT_EQ(q8.qs[0], -127);  // -16 is the largest magnitude
  EXPECT_EQ(q8.qs[16], 0);
  EXPECT_EQ(q8.qs[31], static_cast<int8_t>(std::nearbyint(15.0f * 127.0f / 16.0f)));  // 119.06 -> 119
  BlockQ4_0 q40;
  k.q4_0_encode(x.data(), &q40, 32);
  EXPECT_EQ(fp16_to_fp32(q40.d), 2.0f);  // -16 / -8
  EXPECT_EQ(q40.qs[0] & 0x0f, 0);        // -16 / 2 + 8.5 = 0.5 -> 0
  EXPECT_EQ(q40.qs[0] >> 4, 8);          // element 16: 0 -> 8
  EXPECT_EQ(q40.qs[15] >> 4, 15);        // element 31: 15 / 2 + 8.5 = 16 -> 15
  BlockQ4_1 q41;
  k.q4_1_encode(x.data(), &q41, 32);
  EXPECT_EQ(fp16_to_fp32(q41.d), fp16_to_fp32(fp32_to_fp16(31.0f / 15.0f)));  // (15 - -16) / 15
  EXPECT_EQ(fp16_to_fp32(q41.m), -16.0f);
  // A 2 x 8 plane: column c holds c and -c; each column gets its own scale and minimum.
  std::vector<uint16_t> plane(16);
  for (int c = 0; c < 8; ++c) {
    plane[static_cast<size_t>(c)] = fp32_to_fp16(static_cast<float>(c));
    plane[static_cast<size_t>(8 + c)] = fp32_to_fp16(-static_cast<float>(c));
  }
  std::vector<uint8_t> channel(channel_q4_bytes(2, 8));
  ASSERT_EQ(channel.size(), 8u * 4 + 8u);
  k.channel_q4_encode(plane.data(), channel.data(), 2, 8);
  uint16_t scale3, min3;
  std::memcpy(&scale3, channel.data() + 3 * 2, 2);
  std::memcpy(&min3, channel.data() + 16 + 3 * 2, 2);
  EXPECT_EQ(fp16_to_fp32(min3), -3.0f);
  EXPECT_EQ(fp16_to_fp32(scale3), fp16_to_fp32(fp32_to_fp16(6.0f / 15.0f)));
  EXPECT_EQ(channel[32 + 3], 0x0f);  // row 0 (3): code 15, low nibble; row 1 (-3): code 0, high nibble
  std::vector<uint16_t> back(16);
  k.channel_q4_decode(channel.data(), back.data(), 2, 8);
  for (int c = 0; c < 8; ++c) {
    EXPECT_NEAR(fp16_to_fp32(back[static_cast<size_t>(c)]), static_cast<float>(c), 0.01f) << c;
    EXPECT_NEAR(fp16_to_fp32(back[static_cast<size_t>(8 + c)]), -static_cast<float>(c), 0.01f) << c;
  }
}

}  // namespace
}  // namespace mnemo::kernels

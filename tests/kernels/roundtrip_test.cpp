// from_float then to_float must give back the input up to the format's resolution. Bounds are
// derived from the input values alone (the step a round-to-nearest quantiser of that format can
// achieve), never from the scales the code under test chose.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "kernel_test_util.h"

namespace mnemo::kernels {
namespace {

constexpr double kHalfEps = 0x1p-11;  // relative rounding of a half-precision scale

// Largest rounding error of a value stored as half: relative for normals, absolute (half the
// subnormal spacing) near zero, where small blocks' scales end up.
double half_rounding(double v) { return std::max(std::fabs(v) * kHalfEps, 0x1p-25); }

struct Bounds {
  std::vector<double> max_error;  // per element
  std::vector<double> step;       // per element: the quantisation step, for the RMS check
};

double amax_of(const float* x, int n) {
  double amax = 0.0;
  for (int j = 0; j < n; ++j) amax = std::max(amax, std::fabs(static_cast<double>(x[j])));
  return amax;
}

void set_range(Bounds& bounds, int64_t begin, int n, double max_error, double step) {
  for (int j = 0; j < n; ++j) {
    bounds.max_error[static_cast<size_t>(begin + j)] = max_error;
    bounds.step[static_cast<size_t>(begin + j)] = step;
  }
}

// Symmetric formats: `levels` steps on each side of zero; `clip_steps` extra error where the
// format's asymmetric range clips an extreme (Q4_0/Q5_0 map the signed extreme to -8/-16, so an
// opposite value of the same size lands one step beyond the top level).
void symmetric_bounds(const std::vector<float>& x, int block, double levels, double clip_steps, Bounds& bounds) {
  for (size_t b = 0; b < x.size() / static_cast<size_t>(block); ++b) {
    const double amax = amax_of(&x[b * static_cast<size_t>(block)], block);
    const double step = amax / levels;
    // Levels are computed from the unrounded scale, so its rounding scales every level.
    set_range(bounds, static_cast<int64_t>(b) * block, block,
              (0.5 + clip_steps) * step + (levels + 1) * half_rounding(step), step);
  }
}

void affine_bounds(const std::vector<float>& x, double levels, Bounds& bounds) {
  for (size_t b = 0; b < x.size() / kQK; ++b) {
    const float* v = &x[b * kQK];
    const double lo = *std::min_element(v, v + kQK);
    const double hi = *std::max_element(v, v + kQK);
    const double step = (hi - lo) / levels;
    set_range(bounds, static_cast<int64_t>(b) * kQK, kQK, 0.5 * step + levels * half_rounding(step) + half_rounding(lo),
              step);
  }
}

// Q4_K/Q5_K: per 32-element sub-block, scale (hi - lo) / levels and minimum -lo (lo <= 0), both
// stored as 6-bit multiples of per-super-block units: the step grows by at most one scale unit,
// the minimum is off by at most half a minimum unit.
void affine_k_bounds(const std::vector<float>& x, double levels, Bounds& bounds) {
  for (size_t sb = 0; sb < x.size() / kQKK; ++sb) {
    double ranges[8], negmins[8];
    for (int s = 0; s < 8; ++s) {
      const float* v = &x[sb * kQKK + static_cast<size_t>(s) * 32];
      const double lo = std::min(0.0, static_cast<double>(*std::min_element(v, v + 32)));
      const double hi = *std::max_element(v, v + 32);
      ranges[s] = hi - lo;
      negmins[s] = -lo;
    }
    const double scale_unit = *std::max_element(ranges, ranges + 8) / levels / 63.0;
    const double min_unit = *std::max_element(negmins, negmins + 8) / 63.0;
    const double amax = amax_of(&x[sb * kQKK], kQKK);
    for (int s = 0; s < 8; ++s) {
      const double step = ranges[s] / levels;
      set_range(bounds, static_cast<int64_t>(sb * kQKK) + s * 32, 32,
                0.5 * (step + scale_unit) + 0.5 * min_unit + amax * 4 * kHalfEps, step);
    }
  }
}

// Q6_K: per 16-element sub-block a symmetric step amax / 31, stored as an 8-bit multiple of a
// per-super-block unit.
void q6_k_bounds(const std::vector<float>& x, Bounds& bounds) {
  for (size_t sb = 0; sb < x.size() / kQKK; ++sb) {
    double steps[16];
    for (int s = 0; s < 16; ++s) steps[s] = amax_of(&x[sb * kQKK + static_cast<size_t>(s) * 16], 16) / 31.0;
    const double unit = *std::max_element(steps, steps + 16) / 127.0;
    const double amax = amax_of(&x[sb * kQKK], kQKK);
    for (int s = 0; s < 16; ++s) {
      set_range(bounds, static_cast<int64_t>(sb * kQKK) + s * 16, 16, 0.5 * (steps[s] + unit) + amax * 4 * kHalfEps,
                steps[s]);
    }
  }
}

// Q2_K: per 16-element sub-block an affine step (hi - lo) / 3 and minimum -lo, both stored as
// 4-bit multiples of per-super-block units (as affine_k_bounds, with 15 units).
void q2_k_bounds(const std::vector<float>& x, Bounds& bounds) {
  for (size_t sb = 0; sb < x.size() / kQKK; ++sb) {
    double ranges[16], negmins[16];
    for (int s = 0; s < 16; ++s) {
      const float* v = &x[sb * kQKK + static_cast<size_t>(s) * 16];
      const double lo = std::min(0.0, static_cast<double>(*std::min_element(v, v + 16)));
      ranges[s] = *std::max_element(v, v + 16) - lo;
      negmins[s] = -lo;
    }
    const double scale_unit = *std::max_element(ranges, ranges + 16) / 3.0 / 15.0;
    const double min_unit = *std::max_element(negmins, negmins + 16) / 15.0;
    const double amax = amax_of(&x[sb * kQKK], kQKK);
    for (int s = 0; s < 16; ++s) {
      const double step = ranges[s] / 3.0;
      set_range(bounds, static_cast<int64_t>(sb * kQKK) + s * 16, 16,
                0.5 * (step + scale_unit) + 0.5 * min_unit + amax * 4 * kHalfEps, step);
    }
  }
}

// Q3_K: per 16-element sub-block a symmetric step amax / 4 (the extreme at level -4, the other
// side clipped at 3), the steps stored as 6-bit signed multiples of a super-block unit
// (max step / 32): each step off by at most half a unit: a clipped value is off by up to step + 1.5 units.
void q3_k_bounds(const std::vector<float>& x, Bounds& bounds) {
  for (size_t sb = 0; sb < x.size() / kQKK; ++sb) {
    double steps[16];
    for (int s = 0; s < 16; ++s) steps[s] = amax_of(&x[sb * kQKK + static_cast<size_t>(s) * 16], 16) / 4.0;
    const double unit = *std::max_element(steps, steps + 16) / 32.0;
    const double amax = amax_of(&x[sb * kQKK], kQKK);
    for (int s = 0; s < 16; ++s) {
      set_range(bounds, static_cast<int64_t>(sb * kQKK) + s * 16, 16, 1.0 * steps[s] + 1.5 * unit + amax * 4 * kHalfEps,
                steps[s]);
    }
  }
}

// The IQ4_NL table: the extreme at -127 d, gaps between neighbours up to 24 d (so half a gap
// is 12 d) and the top level 113 d (values up to 127 d clip by up to 14 d); about 16 d apart on
// average, the "step" of the RMS check. IQ4_XS stores d per 32 as 6-bit signed multiples of a
// super-block unit (max d / 32), which moves every level by up to 127 x half a unit.
void iq4_bounds(const std::vector<float>& x, bool six_bit_scales, Bounds& bounds) {
  const size_t super = six_bit_scales ? kQKK : kQK;
  for (size_t sb = 0; sb < x.size() / super; ++sb) {
    std::vector<double> d(super / kQK);
    for (size_t b = 0; b < d.size(); ++b) d[b] = amax_of(&x[sb * super + b * kQK], kQK) / 127.0;
    const double unit = six_bit_scales ? *std::max_element(d.begin(), d.end()) / 32.0 : 0.0;
    for (size_t b = 0; b < d.size(); ++b) {
      set_range(bounds, static_cast<int64_t>(sb * super + b * kQK), kQK,
                14.0 * d[b] + 127.0 * 0.5 * unit + 128 * half_rounding(d[b] + unit), 16.0 * d[b]);
    }
  }
}

// MXFP4: scale 2^(floor(log2 amax) - 2), so amax / scale is in [4, 8); levels 0, 0.5, 1, 1.5, 2,
// 3, 4, 6 of it and their negatives: half a gap is at most 1 scale, a clipped extreme (up to 8)
// 2 scales; the levels' spacing is about 1 scale where most values fall.
void mxfp4_bounds(const std::vector<float>& x, Bounds& bounds) {
  for (size_t b = 0; b < x.size() / kQK; ++b) {
    const double amax = amax_of(&x[b * kQK], kQK);
    const double scale = amax > 0 ? std::exp2(std::floor(std::log2(amax)) - 2) : 0.0;
    set_range(bounds, static_cast<int64_t>(b) * kQK, kQK, 2.0 * scale, scale);
  }
}

Bounds bounds_for(DType type, const std::vector<float>& x) {
  Bounds bounds{std::vector<double>(x.size()), std::vector<double>(x.size())};
  switch (type) {
    case DType::F32:
      break;  // exact: zero bounds
    case DType::F16:
    case DType::BF16:
      for (size_t i = 0; i < x.size(); ++i) {
        const double step = type == DType::F16 ? 2 * half_rounding(x[i]) : std::fabs(x[i]) * 0x1p-7;
        bounds.max_error[i] = 0.5 * step;
        bounds.step[i] = step;
      }
      break;
    case DType::Q8_0:
    case DType::Q8_1:
      symmetric_bounds(x, kQK, 127.0, 0.0, bounds);
      break;
    case DType::Q8_K:
      symmetric_bounds(x, kQKK, 127.0, 0.0, bounds);
      break;
    case DType::Q4_0:
      symmetric_bounds(x, kQK, 8.0, 0.5, bounds);
      break;
    case DType::Q5_0:
      symmetric_bounds(x, kQK, 16.0, 0.5, bounds);
      break;
    case DType::Q4_1:
      affine_bounds(x, 15.0, bounds);
      break;
    case DType::Q5_1:
      affine_bounds(x, 31.0, bounds);
      break;
    case DType::Q4_K:
      affine_k_bounds(x, 15.0, bounds);
      break;
    case DType::Q5_K:
      affine_k_bounds(x, 31.0, bounds);
      break;
    case DType::Q6_K:
      q6_k_bounds(x, bounds);
      break;
    case DType::Q2_K:
      q2_k_bounds(x, bounds);
      break;
    case DType::Q3_K:
      q3_k_bounds(x, bounds);
      break;
    case DType::IQ4_NL:
      iq4_bounds(x, false, bounds);
      break;
    case DType::IQ4_XS:
      iq4_bounds(x, true, bounds);
      break;
    case DType::MXFP4:
      mxfp4_bounds(x, bounds);
      break;
    default:
      ADD_FAILURE() << "no bounds for " << dtype_name(type);
  }
  return bounds;
}

class RoundTrip : public ::testing::TestWithParam<std::tuple<DType, Isa>> {
 protected:
  DType type() const { return std::get<0>(GetParam()); }
  const TypeKernels* kernels() const { return type_kernels(type(), std::get<1>(GetParam())); }

  std::vector<float> round_trip(const std::vector<float>& x) const {
    const auto n = static_cast<int64_t>(x.size());
    std::vector<uint8_t> packed(row_bytes(type(), n));
    kernels()->from_float(x.data(), packed.data(), n);
    std::vector<float> back(x.size());
    kernels()->to_float(packed.data(), back.data(), n);
    return back;
  }
};

TEST_P(RoundTrip, ErrorWithinTheFormatsResolution) {
  std::mt19937 rng(21);
  for (float scale : {1.0f, 1e-3f, 30.0f}) {
    const std::vector<float> x = testing::random_floats(4096, rng, scale);
    const std::vector<float> back = round_trip(x);
    const Bounds bounds = bounds_for(type(), x);
    double error_sq = 0.0, step_sq = 0.0;
    for (size_t i = 0; i < x.size(); ++i) {
      const double error = std::fabs(static_cast<double>(back[i]) - x[i]);
      ASSERT_LE(error, bounds.max_error[i] * (1 + 1e-6) + 1e-30)
          << "element " << i << " x=" << x[i] << " back=" << back[i] << " scale=" << scale;
      error_sq += error * error;
      step_sq += bounds.step[i] * bounds.step[i];
    }
    // Round to nearest leaves errors spread over +-step/2: RMS step/sqrt(12) = 0.29 step.
    if (step_sq > 0) {
      EXPECT_LE(std::sqrt(error_sq / step_sq), 0.36) << "scale=" << scale;
    }
  }
}

TEST_P(RoundTrip, ZerosAndConstants) {
  const std::vector<float> zeros(1024, 0.0f);
  EXPECT_EQ(round_trip(zeros), zeros);
  // A constant block: every format represents it to its scale's precision.
  for (float c : {0.75f, -3.0f}) {
    const std::vector<float> constant(1024, c);
    for (float v : round_trip(constant)) ASSERT_NEAR(v, c, std::fabs(c) * 4 * kHalfEps) << "c=" << c;
  }
}

TEST_P(RoundTrip, ElementsStayInPlace) {
  // A lone spike in each block must come back at its own position: catches swapped halves or
  // nibbles, which the error bounds alone might tolerate in smooth data.
  const int64_t block = testing::block_elems(type()) == 1 ? 32 : testing::block_elems(type());
  std::vector<float> x(1024, 0.0f);
  for (size_t i = 0; i < x.size(); i += static_cast<size_t>(block)) x[i + (i / static_cast<size_t>(block)) % static_cast<size_t>(block)] = 1.0f;
  const std::vector<float> back = round_trip(x);
  for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(back[i], x[i], 0.02) << "element " << i;
}

INSTANTIATE_TEST_SUITE_P(Kernels, RoundTrip,
                         ::testing::Combine(::testing::ValuesIn(testing::all_kernel_types()),
                                            ::testing::ValuesIn(testing::supported_isas())),
                         [](const auto& test_info) {
                           return testing::type_isa_name(std::get<0>(test_info.param), std::get<1>(test_info.param));
                         });

}  // namespace
}  // namespace mnemo::kernels

#include "kernels/nn/exp_weights.h"

#include <bit>
#include <cfloat>
#include <cmath>

#include "kernels/nn/exp_weights_constants.h"

namespace mnemo::kernels {
namespace exp_weights_avx2 {
void exp_weights(const float* x, int64_t n, float max, float temperature, float* out, double* lane_sums);
}  // namespace exp_weights_avx2
namespace exp_weights_avx512 {
void exp_weights(const float* x, int64_t n, float max, float temperature, float* out, double* lane_sums);
}  // namespace exp_weights_avx512

namespace {

using namespace exp_weights_constants;

float weight(float x, float max, float temperature) {
  // The comparisons keep a NaN as it is (as the SIMD min instructions do), and it fails the next.
  const float v = FLT_MAX < x ? FLT_MAX : x;
  float z = (v - max) / temperature;
  z = 0.0f < z ? 0.0f : z;
  if (!(z >= kLowest)) return 0.0f;
  const float n = std::nearbyint(z * kLog2e);
  float r = std::fma(-n, kLn2High, z);
  r = std::fma(-n, kLn2Low, r);
  float p = kPoly[0];
  for (int i = 1; i < 7; ++i) p = std::fma(p, r, kPoly[i]);
  const float two_to_n = std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
  return p * two_to_n;
}

void exp_weights_scalar(const float* x, int64_t n, float max, float temperature, float* out, double* lane_sums) {
  for (int l = 0; l <= kExpWeightLanes; ++l) lane_sums[l] = 0.0;
  const int64_t whole = n / kExpWeightLanes * kExpWeightLanes;
  for (int64_t i = 0; i < n; ++i) {
    out[i] = weight(x[i], max, temperature);
    lane_sums[i < whole ? i % kExpWeightLanes : kExpWeightLanes] += static_cast<double>(out[i]);
  }
}

}  // namespace

ExpWeightsFn exp_weights_kernel(Isa isa) {
  if (isa == Isa::kAvx512 && isa_supported(Isa::kAvx512)) return exp_weights_avx512::exp_weights;
  if (isa == Isa::kAvx2 && isa_supported(Isa::kAvx2)) return exp_weights_avx2::exp_weights;
  return exp_weights_scalar;
}

void exp_weights(const float* x, int64_t n, float max, float temperature, float* out, double* lane_sums) {
  static const ExpWeightsFn kernel = exp_weights_kernel(detected_isa());
  kernel(x, n, max, temperature, out, lane_sums);
}

}  // namespace mnemo::kernels

#include "kernels/nn/argmax.h"

#include <limits>

namespace mnemo::kernels {
namespace argmax_avx2 {
int32_t argmax(const float* x, int64_t n);
}  // namespace argmax_avx2
namespace argmax_avx512 {
int32_t argmax(const float* x, int64_t n);
}  // namespace argmax_avx512

namespace {

int32_t argmax_scalar(const float* x, int64_t n) {
  constexpr float kLargest = std::numeric_limits<float>::max();
  int32_t best = 0;
  float best_value = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i] > kLargest ? kLargest : x[i];  // NaN stays NaN and never compares greater
    if (v > best_value) {
      best_value = v;
      best = static_cast<int32_t>(i);
    }
  }
  return best;
}

}  // namespace

ArgmaxFn argmax_kernel(Isa isa) {
  if (isa == Isa::kAvx512 && isa_supported(Isa::kAvx512)) return argmax_avx512::argmax;
  if (isa == Isa::kAvx2 && isa_supported(Isa::kAvx2)) return argmax_avx2::argmax;
  return argmax_scalar;
}

int32_t argmax(const float* x, int64_t n) {
  static const ArgmaxFn kernel = argmax_kernel(detected_isa());
  return kernel(x, n);
}

}  // namespace mnemo::kernels

#include "kernels/nn/argmax.h"

#include <limits>
#include <vector>

#include "kernels/nn/argmax_lanes.h"

namespace mnemo::kernels {
namespace argmax_avx2 {
int32_t argmax(const float* x, int64_t n);
}  // namespace argmax_avx2
namespace argmax_avx512 {
int32_t argmax(const float* x, int64_t n);
}  // namespace argmax_avx512

namespace {

int32_t argmax_scalar(const float* x, int64_t n) { return argmax_finish(nullptr, nullptr, 0, x, 0, n); }

}  // namespace

int32_t argmax_finish(const float* lane_values, const int32_t* lane_indices, int lanes, const float* x, int64_t from,
                      int64_t n) {
  constexpr float kLargest = std::numeric_limits<float>::max();
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  int32_t best = 0;
  float best_value = kNegInf;
  for (int l = 0; l < lanes; ++l) {
    const float v = lane_values[l];
    if (v > best_value || (v == best_value && v > kNegInf && lane_indices[l] < best)) {
      best_value = v;
      best = lane_indices[l];
    }
  }
  for (int64_t i = from; i < n; ++i) {  // indices above every lane's
    const float v = x[i] > kLargest ? kLargest : x[i];  // NaN stays NaN and never compares greater
    if (v > best_value) {
      best_value = v;
      best = static_cast<int32_t>(i);
    }
  }
  return best;
}

ArgmaxFn argmax_kernel(Isa isa) {
  if (isa == Isa::kAvx512 && isa_supported(Isa::kAvx512)) return argmax_avx512::argmax;
  if (isa == Isa::kAvx2 && isa_supported(Isa::kAvx2)) return argmax_avx2::argmax;
  return argmax_scalar;
}

int32_t argmax(const float* x, int64_t n) {
  static const ArgmaxFn kernel = argmax_kernel(detected_isa());
  return kernel(x, n);
}

int32_t argmax_allowed(const float* x, int64_t n, const uint64_t* allowed) {
  constexpr float kLargest = std::numeric_limits<float>::max();
  int32_t best = 0;
  float best_value = -std::numeric_limits<float>::infinity();
  for (int64_t w = 0; w * 64 < n; ++w) {
    for (uint64_t bits = allowed[w]; bits != 0; bits &= bits - 1) {
      const int64_t i = w * 64 + __builtin_ctzll(bits);
      if (i >= n) break;
      const float v = x[i] > kLargest ? kLargest : x[i];
      if (v > best_value) {
        best_value = v;
        best = static_cast<int32_t>(i);
      }
    }
  }
  return best;
}

int32_t argmax_of_lanes(const ArgmaxRows& rows, int64_t row, int64_t n_rows) {
  // Called per greedy row per step: the buffers keep their capacity.
  thread_local std::vector<float> values;
  thread_local std::vector<int32_t> indices;
  values.clear();
  indices.clear();
  for (int32_t set = 0; set < rows.sets; ++set) {
    const ArgmaxLanes& lanes = *rows.row_lanes(row, n_rows, set);
    values.insert(values.end(), lanes.value, lanes.value + 16);
    indices.insert(indices.end(), lanes.index, lanes.index + 16);
  }
  return argmax_finish(values.data(), indices.data(), static_cast<int>(values.size()), nullptr, 0, 0);
}

}  // namespace mnemo::kernels

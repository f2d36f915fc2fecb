#include "engine/engine_metrics.h"

#include <algorithm>

namespace mnemo {

void Histogram::observe(double value) {
  const size_t bucket = static_cast<size_t>(std::lower_bound(bounds.begin(), bounds.end(), value) - bounds.begin());
  ++counts[bucket];
  sum += value;
  ++count;
}

EngineMetrics::EngineMetrics() {
  data_.ttft_seconds = Histogram({0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60});
  data_.tpot_seconds = Histogram({0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5});
  data_.batch_tokens = Histogram({1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048});
}

}  // namespace mnemo

#include "router/plan_meter.h"

#include <algorithm>
#include <vector>

namespace mnemo::router {
namespace {

double median(std::vector<double> values) {
  if (values.empty()) return 0;
  const size_t mid = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + static_cast<ptrdiff_t>(mid), values.end());
  if (values.size() % 2 == 1) return values[mid];
  const double upper = values[mid];
  return (upper + *std::max_element(values.begin(), values.begin() + static_cast<ptrdiff_t>(mid))) / 2;
}

}  // namespace

PlanMeter::PlanMeter(size_t window) : window_(std::max<size_t>(1, window)) {}

void PlanMeter::record(double first_text_seconds, double total_seconds, int64_t tokens) {
  std::lock_guard lock(mutex_);
  samples_.push_back({first_text_seconds, total_seconds, tokens});
  if (samples_.size() > window_) samples_.pop_front();
}

PlanMeter::Measured PlanMeter::measured() const {
  std::vector<double> firsts, per_token;
  double tokens = 0;
  size_t counted = 0;
  Measured m;
  {
    std::lock_guard lock(mutex_);
    m.requests = samples_.size();
    for (const Sample& s : samples_) {
      if (s.first_text_seconds >= 0) firsts.push_back(s.first_text_seconds);
      if (s.tokens >= 0) {
        tokens += static_cast<double>(s.tokens);
        ++counted;
      }
      if (s.first_text_seconds >= 0 && s.tokens >= 2 && s.total_seconds >= s.first_text_seconds) {
        per_token.push_back((s.total_seconds - s.first_text_seconds) / static_cast<double>(s.tokens - 1));
      }
    }
  }
  m.prompt_seconds = median(std::move(firsts));
  m.token_seconds = median(std::move(per_token));
  m.tokens_generated = counted > 0 ? tokens / static_cast<double>(counted) : 0;
  return m;
}

}  // namespace mnemo::router

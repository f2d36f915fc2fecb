#include "engine/speculation.h"

#include <algorithm>

namespace mnemo {

double expected_accepted(double p, int32_t k) {
  double sum = 0;
  double term = 1;
  for (int32_t i = 0; i < k; ++i) {
    term *= p;
    sum += term;
  }
  return sum;
}

void RowCostEstimator::observe(int32_t rows, double seconds) {
  const auto r = static_cast<double>(rows);
  n_ = n_ * kForget + 1;
  sum_r_ = sum_r_ * kForget + r;
  sum_t_ = sum_t_ * kForget + seconds;
  sum_rr_ = sum_rr_ * kForget + r * r;
  sum_rt_ = sum_rt_ * kForget + r * seconds;
}

double RowCostEstimator::row_cost(double fallback) const {
  if (n_ < 8) return fallback;
  const double variance = sum_rr_ / n_ - (sum_r_ / n_) * (sum_r_ / n_);
  if (variance < 0.25) return fallback;  // rows nearly constant: no slope to see
  const double per_row = (sum_rt_ / n_ - (sum_r_ / n_) * (sum_t_ / n_)) / variance;
  const double fixed = sum_t_ / n_ - per_row * sum_r_ / n_;
  if (fixed + per_row <= 0) return fallback;  // noise: a one-row pass cannot take no time
  return std::clamp(per_row / (fixed + per_row), 0.01, 1.0);
}

double shared_row_cost(double row_cost, int32_t sequences) {
  const double b = sequences > 1 ? static_cast<double>(sequences) : 1.0;
  return b * row_cost / (1.0 + row_cost * (b - 1.0));
}

void AcceptanceTracker::observe(int32_t drafted, int32_t accepted) {
  if (drafted <= 0) return;
  idle_steps_ = 0;
  const int32_t trials = accepted + (accepted < drafted ? 1 : 0);
  const double observed = static_cast<double>(accepted) / static_cast<double>(trials);
  // A long draft all kept says more than one token kept: weigh by trials, capped at one whole
  // replacement.
  const double weight = kWeight * static_cast<double>(trials) > 1.0 ? 1.0 : kWeight * static_cast<double>(trials);
  rate_ += (observed - rate_) * weight;
}

int32_t AcceptanceTracker::draft_length(int32_t max_draft, double row_cost) const {
  int32_t best = 0;
  double best_yield = 1.0;
  for (int32_t k = 1; k <= max_draft; ++k) {
    const double yield = (1.0 + expected_accepted(rate_, k)) / (1.0 + static_cast<double>(k) * row_cost);
    if (yield > best_yield) {  // ties go to the shorter draft
      best = k;
      best_yield = yield;
    }
  }
  return best;
}

}  // namespace mnemo

#include "loadgen/progress_bar.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include <fmt/format.h>

namespace mnemo::loadgen {

ProgressBar::ProgressBar(std::string label, bool enabled, double log_interval_s)
    : label_(std::move(label)), enabled_(enabled), terminal_(isatty(STDERR_FILENO) != 0), log_interval_s_(log_interval_s) {}

std::string ProgressBar::render(const std::string& label, const Progress& progress, int width) {
  const double share = progress.total > 0 ? std::clamp(static_cast<double>(progress.done) / static_cast<double>(progress.total), 0.0, 1.0) : 0.0;
  const int filled = static_cast<int>(share * width);
  return fmt::format("{}[{}{}] {}/{} requests, {} in flight, {} failed, {:.0f} s", label.empty() ? "" : label + " ",
                     std::string(static_cast<size_t>(filled), '#'), std::string(static_cast<size_t>(width - filled), '.'),
                     progress.done, progress.total, progress.in_flight, progress.failed, progress.elapsed_s);
}

void ProgressBar::update(const Progress& progress) {
  if (!enabled_) return;
  if (terminal_) {
    std::fprintf(stderr, "\r%s\x1b[K", render(label_, progress, 30).c_str());
  } else if (progress.elapsed_s - last_log_s_ >= log_interval_s_) {
    std::fprintf(stderr, "%s\n", render(label_, progress, 30).c_str());
    last_log_s_ = progress.elapsed_s;
  } else {
    return;
  }
  std::fflush(stderr);
}

void ProgressBar::finish(const Progress& progress) {
  if (!enabled_) return;
  std::fprintf(stderr, terminal_ ? "\r%s\x1b[K\n" : "%s\n", render(label_, progress, 30).c_str());
  std::fflush(stderr);
}

}  // namespace mnemo::loadgen

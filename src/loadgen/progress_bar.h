// A one-line progress display on stderr while a run goes: a bar redrawn in place on a terminal,
// a plain line every `log_interval_s` seconds otherwise (logs of unattended runs stay readable).
#pragma once

#include <cstdint>
#include <string>

namespace mnemo::loadgen {

struct Progress {
  int64_t done = 0;   // requests finished (ok or failed)
  int64_t total = 0;  // turns planned
  int64_t failed = 0;
  int32_t in_flight = 0;
  double elapsed_s = 0.0;
};

class ProgressBar {
 public:
  ProgressBar(std::string label, bool enabled, double log_interval_s = 10.0);
  void update(const Progress& progress);
  void finish(const Progress& progress);

  static std::string render(const std::string& label, const Progress& progress, int width);

 private:
  std::string label_;
  bool enabled_;
  bool terminal_;
  double log_interval_s_;
  double last_log_s_ = -1e9;
};

}  // namespace mnemo::loadgen

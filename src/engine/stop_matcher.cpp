#include "engine/stop_matcher.h"

#include <algorithm>
#include <utility>

namespace mnemo {

StopMatcher::StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {
  std::erase_if(stops_, [](const std::string& s) { return s.empty(); });
}

StopMatcher::Output StopMatcher::push(const std::string& text) {
  held_ += text;
  if (stops_.empty()) return {std::exchange(held_, {}), false};
  size_t earliest = std::string::npos;
  for (const std::string& stop : stops_) earliest = std::min(earliest, held_.find(stop));
  if (earliest != std::string::npos) {
    Output out{held_.substr(0, earliest), true};
    held_.clear();
    return out;
  }
  // Hold back the longest suffix that is a proper prefix of some stop string.
  size_t keep = 0;
  for (const std::string& stop : stops_) {
    for (size_t len = std::min(stop.size() - 1, held_.size()); len > keep; --len) {
      if (held_.compare(held_.size() - len, len, stop, 0, len) == 0) {
        keep = len;
        break;
      }
    }
  }
  Output out{held_.substr(0, held_.size() - keep), false};
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopMatcher::flush() { return std::exchange(held_, {}); }

}  // namespace mnemo

#include "loadgen/sse_reader.h"

namespace mnemo::loadgen {

bool SseReader::feed(std::string_view bytes) {
  partial_line_.append(bytes);
  size_t start = 0;
  for (size_t newline = partial_line_.find('\n', start); newline != std::string::npos;
       newline = partial_line_.find('\n', start)) {
    std::string_view line(partial_line_.data() + start, newline - start);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    start = newline + 1;
    if (!take_line(line)) {
      partial_line_.erase(0, start);
      return false;
    }
  }
  partial_line_.erase(0, start);
  return true;
}

bool SseReader::take_line(std::string_view line) {
  if (line.empty()) {
    if (!has_data_ && current_.event.empty()) return true;
    SseEvent event = std::move(current_);
    current_ = {};
    has_data_ = false;
    return on_event_(event);
  }
  if (line.front() == ':') return true;
  const size_t colon = line.find(':');
  const std::string_view field = line.substr(0, colon);
  std::string_view value = colon == std::string_view::npos ? std::string_view() : line.substr(colon + 1);
  if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  if (field == "data") {
    if (has_data_) current_.data += '\n';
    current_.data.append(value);
    has_data_ = true;
  } else if (field == "event") {
    current_.event = std::string(value);
  }
  return true;
}

}  // namespace mnemo::loadgen

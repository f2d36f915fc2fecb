// Incremental parser of a server-sent-event stream: bytes arrive in arbitrary pieces; each
// complete event (ended by a blank line) is handed over with its `event:` name (empty if none)
// and its `data:` lines joined by '\n'. Lines may end in "\n" or "\r\n"; comments (":") and
// other fields are ignored.
#pragma once

#include <functional>
#include <string>
#include <string_view>

namespace mnemo::loadgen {

struct SseEvent {
  std::string event;
  std::string data;
};

class SseReader {
 public:
  // Returning false from `on_event` stops the parse; feed() then returns false too.
  using Handler = std::function<bool(const SseEvent&)>;
  explicit SseReader(Handler on_event) : on_event_(std::move(on_event)) {}

  bool feed(std::string_view bytes);

 private:
  bool take_line(std::string_view line);

  Handler on_event_;
  std::string partial_line_;
  SseEvent current_;
  bool has_data_ = false;
};

}  // namespace mnemo::loadgen

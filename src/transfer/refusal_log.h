// Log lines for refused KV transfers: the first refusal of each kind is logged at once, later ones
// of that kind at most once per interval, each line saying how many were left out since the one
// before. A peer (or an attacker) sending a stream of bad messages must not flood the log, and an
// operator must still see that it is happening. Lines carry the reason only, never the secret,
// a MAC or the message's bytes.
//
// Not thread-safe: the transport's progress thread owns it.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mnemo::transfer {

class RefusalLog {
 public:
  using Clock = std::chrono::steady_clock;
  RefusalLog(size_t kinds, Clock::duration interval);

  // The line to write for a refusal of `kind` (< kinds) at `now`, or nothing when the last line
  // of that kind was written less than the interval ago (the refusal is then counted for the
  // next line).
  std::optional<std::string> line(size_t kind, std::string_view text, Clock::time_point now);

 private:
  struct Kind {
    std::optional<Clock::time_point> last;  // when its last line was written
    uint64_t left_out = 0;                  // refusals since then without a line
  };
  Clock::duration interval_;
  std::vector<Kind> kinds_;
};

}  // namespace mnemo::transfer

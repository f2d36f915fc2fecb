#include "sim/trace_stats.h"

#include <algorithm>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "sim/byte_size.h"

namespace mnemo::sim {

TraceStats trace_stats(const Trace& trace, int32_t chunk_tokens) {
  TraceStats s;
  std::vector<std::pair<double, int64_t>> changes;   // (time, change of live chunks)
  std::vector<std::pair<double, int64_t>> running;   // (time, change of pinned prompt chunks)
  for (const TraceConversation& c : trace) {
    if (c.turns.empty()) continue;
    ++s.conversations;
    int64_t held = 0;
    for (const TraceTurn& t : c.turns) {
      ++s.turns;
      s.prompt_tokens += t.prompt_tokens;
      s.reply_tokens += t.reply_tokens;
      s.max_context_tokens = std::max(s.max_context_tokens, t.prompt_tokens + t.reply_tokens);
      s.duration_s = std::max(s.duration_s, t.end_s);
      const int64_t at_start = t.prompt_tokens / chunk_tokens;
      const int64_t at_end = (t.prompt_tokens + t.reply_tokens) / chunk_tokens;
      changes.emplace_back(t.start_s, at_start - held);
      changes.emplace_back(t.end_s, at_end - at_start);
      running.emplace_back(t.start_s, at_start);
      running.emplace_back(t.end_s, -at_start);
      held = at_end;
    }
    changes.emplace_back(c.turns.back().end_s, -held);
  }
  // At equal times decreases come first: a turn that ends as another starts does not overlap it.
  std::sort(changes.begin(), changes.end());
  int64_t live = 0;
  double area = 0;
  for (size_t i = 0; i < changes.size(); ++i) {
    live += changes[i].second;
    s.peak_live_chunks = std::max(s.peak_live_chunks, live);
    if (i + 1 < changes.size()) area += static_cast<double>(live) * (changes[i + 1].first - changes[i].first);
  }
  const double span = changes.empty() ? 0 : changes.back().first - changes.front().first;
  s.mean_live_chunks = span > 0 ? area / span : 0;
  std::sort(running.begin(), running.end());
  int64_t pinned = 0;
  for (const auto& [time, change] : running) {
    pinned += change;
    s.peak_running_chunks = std::max(s.peak_running_chunks, pinned);
  }
  return s;
}

std::string describe_trace(const TraceStats& s, int32_t chunk_tokens, int64_t kv_bytes_per_token) {
  const auto bytes = [&](double chunks) {
    return format_byte_size(static_cast<int64_t>(chunks * static_cast<double>(chunk_tokens) * static_cast<double>(kv_bytes_per_token)));
  };
  return fmt::format(
      "trace: {} conversations, {} turns over {:.0f} s; {} prompt tokens, {} reply tokens, longest context {}\n"
      "live working set: peak {} chunks ({}), mean {:.0f} chunks ({}); running turns pin up to {} chunks ({})\n",
      s.conversations, s.turns, s.duration_s, s.prompt_tokens, s.reply_tokens, s.max_context_tokens, s.peak_live_chunks,
      bytes(static_cast<double>(s.peak_live_chunks)), s.mean_live_chunks, bytes(s.mean_live_chunks), s.peak_running_chunks,
      bytes(static_cast<double>(s.peak_running_chunks)));
}

}  // namespace mnemo::sim

#include "kv/chunk_reuse.h"

#include <algorithm>

namespace mnemo {

void enforce_sliding_windows(std::vector<ChunkUse>& use, int32_t chunk_tokens, int32_t sliding_window) {
  if (sliding_window <= 0) return;
  int64_t earliest_query = static_cast<int64_t>(use.size()) * chunk_tokens;
  for (size_t p = use.size(); p-- > 0;) {
    const int64_t chunk_end = static_cast<int64_t>(p + 1) * chunk_tokens;
    if (use[p] == ChunkUse::kCompact && chunk_end + sliding_window - 1 > earliest_query) use[p] = ChunkUse::kRecompute;
    if (use[p] == ChunkUse::kRecompute) earliest_query = static_cast<int64_t>(p) * chunk_tokens;
  }
}

std::vector<ChunkUse> plan_chunk_use(std::span<const ChunkHold> holds, int32_t chunk_tokens, int32_t sliding_window) {
  std::vector<ChunkUse> use;
  use.reserve(holds.size());
  for (const ChunkHold hold : holds) {
    use.push_back(hold == ChunkHold::kWhole     ? ChunkUse::kFull
                  : hold == ChunkHold::kCompact ? ChunkUse::kCompact
                                                : ChunkUse::kRecompute);
  }
  enforce_sliding_windows(use, chunk_tokens, sliding_window);
  while (!use.empty() && use.back() == ChunkUse::kRecompute) use.pop_back();
  return use;
}

bool compactable(int32_t position, int32_t end_chunks, int32_t chunk_tokens, int32_t sliding_window) {
  if (sliding_window <= 0) return false;
  const int64_t chunk_end = static_cast<int64_t>(position + 1) * chunk_tokens;
  return static_cast<int64_t>(end_chunks) * chunk_tokens - chunk_end >= sliding_window;
}

double layers_per_chunk(int32_t end_chunks, int32_t chunk_tokens, int32_t sliding_window, int32_t layers,
                        int32_t global_layers) {
  if (sliding_window <= 0 || end_chunks <= 0) return layers;
  const int32_t window_chunks = (sliding_window + chunk_tokens - 1) / chunk_tokens;
  const int32_t compact = std::max(0, end_chunks - window_chunks);
  return (static_cast<double>(compact) * global_layers + static_cast<double>(end_chunks - compact) * layers) /
         static_cast<double>(end_chunks);
}

int32_t reused_chunks(std::span<const ChunkUse> plan) {
  return static_cast<int32_t>(std::count_if(plan.begin(), plan.end(), [](ChunkUse u) { return u != ChunkUse::kRecompute; }));
}

}  // namespace mnemo

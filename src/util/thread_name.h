// Names the calling thread (as `top -H`, `perf` and /proc/PID/task/TID/comm show it), so that a
// profile or a benchmark can tell the engine's time from the replicator's, the disk tier's or the
// transport's.
#pragma once

#include <pthread.h>

#include <algorithm>
#include <array>
#include <string_view>

namespace mnemo {

inline void name_this_thread(std::string_view name) {
  std::array<char, 16> text{};  // the kernel keeps 15 characters and the terminator
  const size_t n = std::min(name.size(), text.size() - 1);
  std::copy_n(name.data(), n, text.data());
  (void)pthread_setname_np(pthread_self(), text.data());
}

}  // namespace mnemo

// Polling with a deadline, for conditions that a real etcd makes true in its own time (a lease
// expiring, a watch event arriving). The deadline bounds the test, never a sleep it relies on.
#pragma once

#include <chrono>
#include <functional>
#include <thread>

namespace mnemo::cluster::testing {

inline bool wait_for(const std::function<bool()>& condition, double timeout_seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_seconds);
  while (!condition()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

}  // namespace mnemo::cluster::testing

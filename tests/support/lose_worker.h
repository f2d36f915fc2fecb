// A worker lost inside the test's process: destroyed, then a pause before the coordinator reaches
// for it. The worker's UCX context shares the process's async thread with the coordinator's, and
// a socket the coordinator opens next may take the number of the closed listener's before that
// thread has dropped the listener's handler; UCX then takes the new socket's events for a
// connection request to a listener that is gone, and crashes in uct_listener_reject (seen once,
// in a full ctest run under load). A worker killed in a process of its own, as in production and
// the e2e tests, shares nothing with the coordinator.
#pragma once

#include <chrono>
#include <memory>
#include <thread>

#include "parallel/stage_worker.h"

namespace mnemo::testing {

inline void lose_worker(std::unique_ptr<parallel::StageWorker>& worker) {
  worker.reset();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
}

}  // namespace mnemo::testing

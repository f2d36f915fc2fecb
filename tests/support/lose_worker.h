// A worker lost inside the test's process. It is not destroyed: it refuses every frame from then
// on (StageWorker::simulate_loss), which is what a coordinator sees of a killed worker. Tearing a
// worker's UCX context down beside the coordinator's in one process crashed UCX 1.13 now and then
// under load (a segfault in its async thread, in ucp_cm_server_conn_request_cb, while the
// coordinator reconnected), which a worker killed in a process of its own, as in production and
// the e2e tests (tests/e2e/python/test_parallel_pipeline.py: SIGKILL), never shares.
#pragma once

#include <memory>

#include "parallel/stage_worker.h"

namespace mnemo::testing {

inline void lose_worker(std::unique_ptr<parallel::StageWorker>& worker) { worker->simulate_loss(); }

}  // namespace mnemo::testing

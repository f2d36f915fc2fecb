// One pipeline stage (SPEC D6) or tensor-parallel rank (SPEC P10: set up with tensor ranks, it
// answers each tensor rows frame with its share of a layer's block), the process `mnemo worker` runs: it listens on a stage link,
// is set up by a coordinator (which layers, which KV pool; stage_frame.h), then runs each rows
// frame through its layers and sends it on along the frame's route.
//
// Threads: the link's progress thread takes frames (a setup loads the layers there, then swaps
// them in between two microbatches; rows are queued); one compute thread runs the queue in
// order, with the stage's thread pool, and sends each result on. The compute thread holds the
// stage's model only while it computes, never while it sends, so the progress thread (which the
// sends need) never waits on a send.
//
// Replication (SPEC D7, as DejaVu applies it to pipeline stages): before a stage sends a
// microbatch's rows on, it sends the KV the microbatch wrote (per token) to the frame's replica
// holder for it, the next stage, which keeps it in a replica store of the sender's layers. When
// a stage is lost, the coordinator sets a spare up for its layers and asks the holder to restore
// the replica onto it (and the stage before to send its own KV there, since the lost stage held
// that one's replica), then runs the pass again: nothing the lost stage had computed is computed
// again.
//
// The coordinator's KV cache keeps its host and disk tiers itself: it pulls a stage's share of
// the blocks it moves down and pushes those it brings back (pull, push and copy frames, run in
// order with the microbatches), so a chunk is on every stage or on none.
//
// Failure behaviour: a setup for another model file, or layers the file does not have, is
// refused (the coordinator's send fails with the reason). A rows frame the stage cannot run (no
// setup yet, a batch its layers refuse) or cannot send on is answered with an error frame to the
// coordinator, the route's last endpoint, so the pass fails at once rather than at its timeout.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "kv/kv_storage.h"
#include "model/model.h"
#include "parallel/microbatch_swap.h"
#include "parallel/stage_link.h"
#include "util/thread_pool.h"

namespace mnemo::parallel {

struct StageWorkerOptions {
  std::string model_path;
  std::string host = "127.0.0.1";
  int port = 0;                 // 0: any free port
  std::string cluster_secret;   // empty: loopback only, unsigned
  int threads = 0;              // the compute pool; 0: one per core
  size_t prepack_budget_bytes = LoadOptions{}.prepack_budget_bytes;
  // Tokens of the stage's own (device) pool, in whole blocks; 0, or at least the coordinator's
  // pool: every block in it. Fewer: the coordinator's blocks live in a host pool and each
  // microbatch's are swapped in as it runs (microbatch_swap.h).
  int64_t device_pool_tokens = 0;
  double send_timeout_seconds = 30;
};

class StageWorker {
 public:
  static Result<std::unique_ptr<StageWorker>> start(const StageWorkerOptions& options);
  ~StageWorker();
  StageWorker(const StageWorker&) = delete;
  StageWorker& operator=(const StageWorker&) = delete;

  std::string endpoint() const { return link_->endpoint(); }
  // Fault injection for tests that run workers in their own process: from now on the worker
  // refuses every frame, as sends to a killed worker fail, without tearing its UCX context down
  // beside the coordinator's (tests/support/lose_worker.h says why). Killed processes are what
  // the e2e tests lose.
  void simulate_loss() { lost_.store(true); }

  struct Stats {
    uint64_t setups = 0;
    uint64_t microbatches_run = 0;
    uint64_t microbatches_failed = 0;
    uint64_t tokens_replicated = 0;  // sent to a replica holder
    uint64_t restores = 0;           // restores this stage sent
    MicrobatchSwap::Stats swap;      // all zero without swapping
  };
  Stats stats() const;

 private:
  StageWorker(StageWorkerOptions options, uint64_t model_fingerprint);
  Status on_frame(StageFrame&& frame);  // the link's progress thread
  Status enqueue(StageFrame&& frame);   // for the compute thread; refused when the queue is full
  Status set_up(const StageSetup& setup);
  void run();                           // the compute thread
  Status run_rows(StageFrame& frame);
  Status run_tensor_part(StageFrame& frame);
  Status compute(StageFrame& frame);
  Status compute_tensor_part(StageFrame& frame, bool& pass_stored);
  void mark_written(const std::vector<SequenceInput>& sequences);
  void send_on(StageFrame&& frame);
  void send_error(const StageFrame& about, const std::string& message);
  // stage_worker_kv.cpp: replication and restores.
  Status take_kv(const StageFrame& frame);             // the progress thread
  Status replicate(const StageFrame& rows, const std::string& holder);  // the compute thread
  Status restore(const StageFrame& request);           // the compute thread
  // The coordinator's KV cache moving chunks (kv/remote_device.h), on the compute thread in
  // order with the passes: this stage's share of blocks sent to it, written (and on to the
  // replica holder), or copied block to block in its pool and the replicas it holds; each
  // answered to the route's last endpoint.
  Status pull(const StageFrame& request);
  Status push(const StageFrame& request);
  Status copy_blocks(const StageFrame& request);
  Status run_block_op(const StageFrame& request);

  const StageWorkerOptions options_;
  const uint64_t model_fingerprint_;
  ThreadPool pool_;

  mutable std::mutex model_mutex_;  // the stage: held to compute and to swap in a new setup
  std::unique_ptr<Model> model_;
  std::unique_ptr<KvStorage> kv_;       // every block, by the coordinator's ids (the host pool when swapping)
  std::unique_ptr<KvStorage> device_;   // with swapping: the pool the layers run on
  std::unique_ptr<MicrobatchSwap> swap_;
  StageSetup setup_;
  std::vector<uint8_t> written_;  // per block of kv_: holds KV (restores send only these)

  // Other stages' KV this stage holds the replica of, by their first layer. Apart from the
  // stage's own lock, so that a replica arriving while this stage computes is stored at once
  // (the stage before waits for it to send its rows on). Lock order: model_mutex_ first.
  struct ReplicaStore {
    int32_t layer_end = 0;
    std::unique_ptr<KvStorage> kv;
    std::vector<uint8_t> written;
  };
  mutable std::mutex replica_mutex_;
  std::map<int32_t, ReplicaStore> replicas_;  // guarded by replica_mutex_
  KvLayout replica_layout_;                   // guarded by replica_mutex_: the setup's, any layer count
  int32_t replica_n_blocks_ = 0;              // guarded by replica_mutex_: the coordinator's pool
  int32_t model_layers_ = 0;                  // guarded by replica_mutex_; 0: not set up

  mutable std::mutex queue_mutex_;
  std::condition_variable queue_cv_;
  std::deque<StageFrame> queue_;
  bool stopping_ = false;
  Stats stats_;  // guarded by queue_mutex_
  uint64_t tokens_replicated_ = 0;  // compute thread; copied into stats()

  std::atomic<bool> lost_{false};  // simulate_loss()
  std::unique_ptr<StageLink> link_;
  std::thread thread_;
};

}  // namespace mnemo::parallel

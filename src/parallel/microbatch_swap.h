// Microbatch swapping (SPEC D6, DejaVu): a pipeline stage whose pool holds fewer blocks than the
// coordinator's KV keeps every block in a host pool and brings a microbatch's blocks into the
// stage's (device) pool just before it runs, layer by layer on a copy thread while the layers
// before run, then writes the blocks it wrote back out. So the batch a stage serves is bounded
// by host memory, not by its pool: a pool of one microbatch's blocks serves any number of them.
//
//   run(m):  map m's blocks to device slots ──▶ copy thread: layer 0, 1, ... of each block in
//            compute: layer l waits for layer l's copy (Batch::before_layer), then runs
//            after the last layer: the blocks m wrote, device ──▶ host
//
// The tables the layers see are remapped to device slots for the pass only; callers keep the
// coordinator's block ids. On a CPU both pools are RAM and the copy is a memcpy: what this shows
// there is correctness and the overlap (a pass's time against the same pass without swapping),
// not a speed-up. Not thread-safe: the stage's compute thread calls run(); the copy thread is
// internal.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "kv/kv_storage.h"
#include "model/batch.h"
#include "util/result.h"

namespace mnemo::parallel {

class MicrobatchSwap {
 public:
  // Same layout but for n_blocks; `host` holds the coordinator's block ids, `device` fewer slots.
  // `overlap` false: every layer is copied in before the first runs (what the overlap saves is
  // measured against this; bench/pipeline_swap_bench.cpp).
  MicrobatchSwap(KvStorage& host, KvStorage& device, bool overlap = true);
  ~MicrobatchSwap();
  MicrobatchSwap(const MicrobatchSwap&) = delete;
  MicrobatchSwap& operator=(const MicrobatchSwap&) = delete;

  // Runs `layers` over `batch` with its blocks in the device pool: `layers` gets the batch with
  // device slots in its tables and before_layer waiting for each layer's copy (stage layer
  // `il - first_layer`). An error if the batch needs more blocks than the device pool holds.
  Status run(Batch& batch, int32_t first_layer, const std::function<Status(const Batch&)>& layers);

  struct Stats {
    uint64_t microbatches = 0;
    uint64_t blocks_in = 0;
    uint64_t blocks_out = 0;
    double wait_seconds = 0;  // compute waiting for a layer's copy (what the overlap did not hide)
  };
  const Stats& stats() const { return stats_; }

 private:
  void copy_loop();
  void copy_in(int32_t layer);

  KvStorage& host_;
  KvStorage& device_;
  const bool overlap_;
  size_t layer_bytes_ = 0;
  std::vector<BlockId> slot_of_;  // per host block: its device slot in the current microbatch, or kNoBlock
  std::vector<BlockId> in_;       // the current microbatch's host blocks, device slot i holds in_[i]

  std::mutex mutex_;
  std::condition_variable cv_;
  uint64_t job_ = 0;              // the microbatch whose copy the thread runs (0: none yet)
  int32_t layers_copied_ = 0;     // of job_
  bool stopping_ = false;
  Stats stats_;
  std::thread thread_;
};

}  // namespace mnemo::parallel

// A persistent pool of worker threads shared by all kernels: started once (one worker per core by
// default), no thread creation per step. The calling thread always takes part in the work.
//
// Dispatch is a generation counter the workers watch: after a job they spin on it for a short
// while (a forward pass hands out the next job within microseconds) and only then sleep on it
// (futex through std::atomic::wait), so back-to-back jobs cost no system call. The caller waits
// for the last worker the same way.
//
// parallel_for splits [0, n) into one contiguous range per thread (the caller's thread takes the
// first); parallel_chunks hands out chunks on demand, and parallel_shares lets a thread that is
// done take work from the others, which keeps both cores busy when one of them is slowed by
// other work on the machine. None decides *what* a thread
// computes for one output element, so results never depend on the thread count or on timing.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

namespace mnemo {

class ThreadPool {
 public:
  // n_threads includes the calling thread; 0 means one per hardware core.
  explicit ThreadPool(int n_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // fn(begin, end, thread_index) over a partition of [0, n). Not reentrant.
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t, int)>& fn);

  // fn(begin, end, thread_index) over chunks [begin, end) of `chunk` indices (the last one may be
  // shorter), taken by whichever thread is free. Not reentrant.
  void parallel_chunks(int64_t n, int64_t chunk, const std::function<void(int64_t, int64_t, int)>& fn);

  // fn(begin, end, stream_end, thread_index) over a partition of [0, n): each thread owns one
  // contiguous share (as parallel_for's) and takes it `grain` indices at a time from the front,
  // stream_end being where its share then ends: what follows [begin, end) up to there is likely
  // to be its next piece, so it may fetch ahead that far. A thread done with its share takes
  // `grain` indices at a time from the back of the share with the most left (stream_end = end),
  // so a thread slowed by other work on the machine is not waited for long, while each share is
  // still streamed front to back by its owner. (Chunks handed out on demand restart cold at every
  // chunk: the default model's layer products at batch 32 took 7-14% longer that way with their
  // weights coming from memory.) Not reentrant; n < 2^32.
  void parallel_shares(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t, int64_t, int)>& fn);

  // fn(thread_index) on every thread once.
  void run_on_all(const std::function<void(int)>& fn);

 private:
  void worker_loop(int index);

  int n_threads_;
  std::vector<std::thread> workers_;
  const std::function<void(int)>* job_ = nullptr;  // published by the release store of generation_
  // 32-bit counters so that std::atomic::wait maps straight onto a futex.
  std::atomic<uint32_t> generation_{0};  // bumped once per job (and at shutdown)
  std::atomic<int> pending_{0};          // workers still running the current job
  std::atomic<int> sleepers_{0};         // workers that may be asleep on generation_
  std::atomic<int> caller_sleeping_{0};  // 1 while the caller may be asleep on pending_
  std::atomic<bool> stop_{false};
};

}  // namespace mnemo

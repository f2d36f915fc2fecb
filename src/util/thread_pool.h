// A persistent pool of worker threads shared by all kernels: started once, no thread creation
// per step. parallel_for splits [0, n) into contiguous ranges, one per thread (the caller's
// thread takes the first), and returns when all are done.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
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

  // fn(thread_index) on every thread once.
  void run_on_all(const std::function<void(int)>& fn);

 private:
  void worker_loop(int index);

  int n_threads_;
  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  const std::function<void(int)>* job_ = nullptr;  // guarded by mutex_
  uint64_t generation_ = 0;                         // guarded by mutex_
  int pending_ = 0;                                 // guarded by mutex_
  bool stop_ = false;                               // guarded by mutex_
};

}  // namespace mnemo

#include "util/thread_pool.h"

#include <algorithm>
#include <cassert>
#include <chrono>
#include <thread>

#include "util/thread_name.h"

namespace mnemo {
namespace {

// How long an idle thread keeps polling before it sleeps. The jobs of one forward pass follow
// each other within microseconds, so polling avoids a futex wake (tens of microseconds on a VM)
// per job; between steps the workers fall asleep and leave the cores to others. After the first
// few microseconds the polling yields the core between looks, so that on a machine with more
// runnable threads than cores it does not take time from the thread it is waiting for.
constexpr auto kSpinTime = std::chrono::microseconds(200);
constexpr int kPausesBeforeYield = 1024;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Returns once `value` differs from `old`: polls for kSpinTime, then sleeps on it. `sleepers`
// counts the threads that may be asleep, so that the publisher only makes the wake-up system
// call when someone needs it (both sides use sequentially consistent operations: either the
// sleeper sees the new value, or the publisher sees the sleeper).
template <class T>
T wait_for_change(const std::atomic<T>& value, T old, std::atomic<int>& sleepers) {
  const auto deadline = std::chrono::steady_clock::now() + kSpinTime;
  for (int i = 0;; ++i) {
    const T now = value.load(std::memory_order_acquire);
    if (now != old) return now;
    if (i < kPausesBeforeYield) {
      cpu_relax();
    } else {
      std::this_thread::yield();
      if (std::chrono::steady_clock::now() > deadline) break;
    }
  }
  sleepers.fetch_add(1, std::memory_order_seq_cst);
  T now = value.load(std::memory_order_seq_cst);
  while (now == old) {
    value.wait(old, std::memory_order_seq_cst);
    now = value.load(std::memory_order_seq_cst);
  }
  sleepers.fetch_sub(1, std::memory_order_relaxed);
  return now;
}

}  // namespace

ThreadPool::ThreadPool(int n_threads) {
  if (n_threads <= 0) n_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  n_threads_ = n_threads;
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_seq_cst);
  generation_.fetch_add(1, std::memory_order_seq_cst);
  generation_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::worker_loop(int index) {
  name_this_thread("mnemo-compute");
  uint32_t seen = 0;
  for (;;) {
    seen = wait_for_change(generation_, seen, sleepers_);
    if (stop_.load(std::memory_order_acquire)) return;
    (*job_)(index);
    if (pending_.fetch_sub(1, std::memory_order_seq_cst) == 1 && caller_sleeping_.load(std::memory_order_seq_cst) > 0) {
      pending_.notify_one();
    }
  }
}

void ThreadPool::run_on_all(const std::function<void(int)>& fn) {
  if (n_threads_ == 1) {
    fn(0);
    return;
  }
  job_ = &fn;
  pending_.store(n_threads_ - 1, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_seq_cst);  // publishes job_ and pending_
  if (sleepers_.load(std::memory_order_seq_cst) > 0) generation_.notify_all();
  fn(0);
  int left = pending_.load(std::memory_order_acquire);
  while (left != 0) left = wait_for_change(pending_, left, caller_sleeping_);
  job_ = nullptr;
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t, int)>& fn) {
  if (n <= 0) return;
  const int64_t threads = std::min<int64_t>(n_threads_, n);
  if (threads == 1) {
    fn(0, n, 0);
    return;
  }
  run_on_all([&](int t) {
    if (t >= threads) return;
    const int64_t begin = n * t / threads;
    const int64_t end = n * (t + 1) / threads;
    fn(begin, end, t);
  });
}

void ThreadPool::parallel_chunks(int64_t n, int64_t chunk, const std::function<void(int64_t, int64_t, int)>& fn) {
  if (n <= 0) return;
  chunk = std::max<int64_t>(chunk, 1);
  if (n_threads_ == 1 || n <= chunk) {
    fn(0, n, 0);
    return;
  }
  std::atomic<int64_t> next{0};
  run_on_all([&](int t) {
    for (;;) {
      const int64_t begin = next.fetch_add(chunk, std::memory_order_relaxed);
      if (begin >= n) return;
      fn(begin, std::min(n, begin + chunk), t);
    }
  });
}

void ThreadPool::parallel_shares(int64_t n, int64_t grain,
                                 const std::function<void(int64_t, int64_t, int64_t, int)>& fn) {
  if (n <= 0) return;
  assert(n < (int64_t{1} << 32));
  grain = std::max<int64_t>(grain, 1);
  const int64_t threads = std::min<int64_t>(n_threads_, (n + grain - 1) / grain);
  if (threads == 1) {
    fn(0, n, n, 0);
    return;
  }
  // Each share's [front, back) in one word, so that its owner and the thieves claim atomically.
  struct alignas(64) Share {
    std::atomic<uint64_t> range;
  };
  const auto pack = [](int64_t front, int64_t back) { return static_cast<uint64_t>(front) << 32 | static_cast<uint64_t>(back); };
  const auto front_of = [](uint64_t range) { return static_cast<int64_t>(range >> 32); };
  const auto back_of = [](uint64_t range) { return static_cast<int64_t>(range & 0xffffffffu); };
  std::vector<Share> shares(static_cast<size_t>(threads));
  for (int64_t t = 0; t < threads; ++t) shares[static_cast<size_t>(t)].range.store(pack(n * t / threads, n * (t + 1) / threads));
  run_on_all([&](int t) {
    if (t < threads) {
      std::atomic<uint64_t>& own = shares[static_cast<size_t>(t)].range;
      uint64_t range = own.load(std::memory_order_acquire);
      while (front_of(range) < back_of(range)) {
        const int64_t front = front_of(range), back = back_of(range);
        const int64_t end = std::min(back, front + grain);
        if (own.compare_exchange_weak(range, pack(end, back), std::memory_order_acq_rel)) {
          fn(front, end, back, t);
          range = own.load(std::memory_order_acquire);
        }
      }
    }
    for (;;) {
      size_t victim = shares.size();
      int64_t most = 0;
      for (size_t i = 0; i < shares.size(); ++i) {
        const uint64_t range = shares[i].range.load(std::memory_order_acquire);
        if (back_of(range) - front_of(range) > most) {
          most = back_of(range) - front_of(range);
          victim = i;
        }
      }
      if (victim == shares.size()) return;
      uint64_t range = shares[victim].range.load(std::memory_order_acquire);
      const int64_t front = front_of(range), back = back_of(range);
      if (front >= back) continue;
      const int64_t begin = std::max(front, back - grain);
      if (shares[victim].range.compare_exchange_strong(range, pack(front, begin), std::memory_order_acq_rel)) {
        fn(begin, back, back, t);
      }
    }
  });
}

}  // namespace mnemo

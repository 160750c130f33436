// A fixed pool of worker threads for data-parallel loops (CPU backend). Idle threads spin
// briefly (200 µs) for the next job before they sleep.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace orchid {

class ThreadPool {
 public:
  // n_threads <= 0: one per hardware thread.
  explicit ThreadPool(int n_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return int(workers_.size()) + 1; }
  // Calls fn(begin, end) over [0, n) split into contiguous blocks of at least `grain` items,
  // one block per thread (the caller runs one). Returns when all are done.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

 private:
  void worker_loop(int index);

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable wake_, done_;
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;  // guarded by mu_
  int64_t job_n_ = 0;
  int job_blocks_ = 0;
  std::atomic<uint64_t> generation_{0};  // moves (under mu_) when a job is published
  std::atomic<int> pending_{0};          // worker blocks of the current job not yet done
  std::atomic<bool> stop_{false};
};

// The process-wide pool used by the CPU backend (threads = ORCHID_THREADS or all cores).
ThreadPool& default_pool();

}  // namespace orchid

// ThreadPool: workers sleep on a condition variable and each runs one block of a job.
#include "orchid/util/thread_pool.h"

#include <algorithm>
#include <cstdlib>

namespace orchid {

ThreadPool::ThreadPool(int n_threads) {
  if (n_threads <= 0) n_threads = int(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 1; i < n_threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::parallel_for(int64_t n, int64_t grain,
                              const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  int blocks =
      int(std::min<int64_t>(size(), std::max<int64_t>(1, n / std::max<int64_t>(grain, 1))));
  if (blocks <= 1) {
    fn(0, n);
    return;
  }
  {
    std::lock_guard lock(mu_);
    job_ = &fn;
    job_n_ = n;
    job_blocks_ = blocks;
    pending_ = blocks - 1;
    ++generation_;
  }
  wake_.notify_all();
  fn(0, n / blocks);  // block 0 on the calling thread
  std::unique_lock lock(mu_);
  done_.wait(lock, [this] { return pending_ == 0; });
  job_ = nullptr;
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    std::unique_lock lock(mu_);
    wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    if (index >= job_blocks_) continue;
    const auto* fn = job_;
    const int64_t n = job_n_, blocks = job_blocks_;
    lock.unlock();
    (*fn)(n * index / blocks, n * (index + 1) / blocks);
    lock.lock();
    if (--pending_ == 0) done_.notify_one();
  }
}

ThreadPool& default_pool() {
  static ThreadPool pool([] {
    const char* env = std::getenv("ORCHID_THREADS");
    return env ? std::atoi(env) : 0;
  }());
  return pool;
}

}  // namespace orchid

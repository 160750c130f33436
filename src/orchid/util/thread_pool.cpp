// ThreadPool: a job is published under the mutex with a generation number; workers spin on that
// number for a short while before sleeping on the condition variable, and the caller spins on the
// pending count before sleeping. A decode step of the CPU backend runs ~70 jobs of a few hundred
// microseconds each: waking a sleeping thread through the kernel for every one of them cost more
// than the spinning does.
#include "orchid/util/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace orchid {
namespace {

// How long a thread spins for the next job (or the job's end) before it sleeps.
constexpr std::chrono::microseconds kSpin{200};

inline void cpu_relax() {
#if defined(__x86_64__)
  _mm_pause();
#endif
}

// Spins until done() or kSpin passed; true when done() held.
template <typename Done>
bool spin_until(Done done) {
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 1;; ++i) {
    if (done()) return true;
    cpu_relax();
    if (i % 64 == 0 && std::chrono::steady_clock::now() - t0 > kSpin) return done();
  }
}

}  // namespace

ThreadPool::ThreadPool(int n_threads) {
  if (n_threads <= 0) n_threads = int(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 1; i < n_threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mu_);
    stop_.store(true);
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
    pending_.store(blocks - 1);
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  fn(0, n / blocks);  // block 0 on the calling thread
  if (!spin_until([this] { return pending_.load(std::memory_order_acquire) == 0; })) {
    std::unique_lock lock(mu_);
    done_.wait(lock, [this] { return pending_.load() == 0; });
  }
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    auto fresh = [&] {
      return stop_.load(std::memory_order_acquire) ||
             generation_.load(std::memory_order_acquire) != seen;
    };
    if (!spin_until(fresh)) {
      std::unique_lock lock(mu_);
      wake_.wait(lock, fresh);
    }
    if (stop_.load()) return;
    const std::function<void(int64_t, int64_t)>* fn;
    int64_t n;
    int blocks;
    {
      // The job's fields were written under the mutex before the generation moved.
      std::lock_guard lock(mu_);
      seen = generation_.load();
      fn = job_, n = job_n_, blocks = job_blocks_;
    }
    if (index >= blocks) continue;
    (*fn)(n * index / blocks, n * (index + 1) / blocks);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard lock(mu_);  // pairs with the caller's check before it sleeps
      done_.notify_one();
    }
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

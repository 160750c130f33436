// Runs jobs in arrival order on `workers` threads (the engine's slots: each running job owns one
// and the engine interleaves their steps), through a bounded queue of waiting jobs.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace orchid {

class Scheduler {
 public:
  explicit Scheduler(size_t max_queued, int workers = 1);
  ~Scheduler();  // stops after the running jobs; queued jobs are run with cancelled = true
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // A job gets `cancelled` = true when the scheduler shuts down before it starts.
  using Job = std::function<void(bool cancelled)>;
  // Queues a job; false when max_queued jobs already wait (the caller answers 503).
  bool submit(Job job);
  size_t queued() const;  // waiting, not counting the running ones
  bool busy() const;      // a job is running
  int running() const;    // jobs running
  // Stop taking jobs; queued ones run cancelled; returns when the worker has ended.
  void shutdown();

 private:
  void loop();

  const size_t max_queued_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> jobs_;
  int running_ = 0;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace orchid

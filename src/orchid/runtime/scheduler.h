// Runs jobs one at a time, in arrival order, on one worker thread, through a bounded queue
// (batch 1 is the product's focus: one request owns the model while it runs).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace orchid {

class Scheduler {
 public:
  explicit Scheduler(size_t max_queued);
  ~Scheduler();  // stops after the running job; queued jobs are run with cancelled = true
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // A job gets `cancelled` = true when the scheduler shuts down before it starts.
  using Job = std::function<void(bool cancelled)>;
  // Queues a job; false when max_queued jobs already wait (the caller answers 503).
  bool submit(Job job);
  size_t queued() const;  // waiting, not counting the running one
  bool busy() const;      // a job is running
  // Stop taking jobs; queued ones run cancelled; returns when the worker has ended.
  void shutdown();

 private:
  void loop();

  const size_t max_queued_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> jobs_;
  bool running_ = false;
  bool stopping_ = false;
  std::thread worker_;
};

}  // namespace orchid

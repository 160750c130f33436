// The threads that run request handlers and write streamed answers: made on demand up to a
// maximum, and the one that went idle last takes the next job, so a light load keeps reusing
// a few warm threads (a pool that starts them all and wakes them round-robin touches every
// thread's stack and malloc cache, and the resident memory creeps up to the pool's size).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace orchid::server {

class WorkerPool {
 public:
  explicit WorkerPool(size_t max_threads);
  ~WorkerPool();  // shutdown()
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Runs fn on an idle thread, a new one, or (all max_threads busy) the next one free.
  void enqueue(std::function<void()> fn);
  // Runs what is queued, then joins every thread. Idempotent.
  void shutdown();

 private:
  struct Worker {
    std::thread thread;
    std::condition_variable cv;
    std::function<void()> job;
  };
  void run(Worker& w);

  const size_t max_;
  std::mutex mu_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::vector<Worker*> idle_;  // most recently idle last
  std::deque<std::function<void()>> pending_;
  bool stopping_ = false;
};

}  // namespace orchid::server

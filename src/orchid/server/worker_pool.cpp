// WorkerPool: a stack of idle workers under one mutex; each waits on its own condition
// variable, so enqueue wakes exactly the one it hands the job to.
#include "orchid/server/worker_pool.h"

#include <algorithm>

namespace orchid::server {

WorkerPool::WorkerPool(size_t max_threads) : max_(std::max<size_t>(1, max_threads)) {}

WorkerPool::~WorkerPool() { shutdown(); }

void WorkerPool::enqueue(std::function<void()> fn) {
  std::lock_guard lock(mu_);
  if (!idle_.empty()) {
    Worker* w = idle_.back();
    idle_.pop_back();
    w->job = std::move(fn);
    w->cv.notify_one();
  } else if (workers_.size() < max_) {
    auto w = std::make_unique<Worker>();
    w->job = std::move(fn);
    Worker* p = w.get();
    workers_.push_back(std::move(w));
    p->thread = std::thread([this, p] { run(*p); });
  } else {
    pending_.push_back(std::move(fn));  // every thread is busy: the next one free takes it
  }
}

void WorkerPool::shutdown() {
  std::vector<std::unique_ptr<Worker>> workers;
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    for (auto& w : workers_) w->cv.notify_one();
    workers.swap(workers_);
    idle_.clear();
  }
  for (auto& w : workers)
    if (w->thread.joinable()) w->thread.join();
}

void WorkerPool::run(Worker& w) {
  std::unique_lock lock(mu_);
  for (;;) {
    if (w.job) {
      auto job = std::move(w.job);
      w.job = nullptr;
      lock.unlock();
      job();
      job = nullptr;  // its captures die outside the lock
      lock.lock();
    } else if (!pending_.empty()) {
      w.job = std::move(pending_.front());
      pending_.pop_front();
    } else if (stopping_) {
      return;
    } else {
      idle_.push_back(&w);
      w.cv.wait(lock, [&] { return w.job || stopping_; });
      if (!w.job) return;  // stopping (enqueue took it off idle_ when it gave a job)
    }
  }
}

}  // namespace orchid::server

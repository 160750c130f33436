// Scheduler: a mutex-guarded deque drained by a few worker threads.
#include "orchid/runtime/scheduler.h"

#include <algorithm>

namespace orchid {

Scheduler::Scheduler(size_t max_queued, int workers) : max_queued_(max_queued) {
  for (int i = 0; i < std::max(workers, 1); ++i) workers_.emplace_back([this] { loop(); });
}

Scheduler::~Scheduler() { shutdown(); }

bool Scheduler::submit(Job job) {
  {
    std::lock_guard lock(mu_);
    if (stopping_ || jobs_.size() >= max_queued_) return false;
    jobs_.push_back(std::move(job));
  }
  cv_.notify_one();
  return true;
}

size_t Scheduler::queued() const {
  std::lock_guard lock(mu_);
  return jobs_.size();
}

bool Scheduler::busy() const {
  std::lock_guard lock(mu_);
  return running_ > 0;
}

int Scheduler::running() const {
  std::lock_guard lock(mu_);
  return running_;
}

void Scheduler::shutdown() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (std::thread& w : workers_)
    if (w.joinable()) w.join();
}

void Scheduler::loop() {
  for (;;) {
    Job job;
    bool cancelled;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
      if (jobs_.empty()) return;  // stopping with nothing left
      job = std::move(jobs_.front());
      jobs_.pop_front();
      cancelled = stopping_;
      ++running_;
    }
    job(cancelled);
    std::lock_guard lock(mu_);
    --running_;
  }
}

}  // namespace orchid

#include "orchid/util/load_progress.h"

#include <atomic>
#include <chrono>
#include <mutex>

namespace orchid {
namespace {

using Clock = std::chrono::steady_clock;

struct State {
  std::mutex mu;  // guards sink, what, total, start, last and the sink's calls
  std::function<void(const LoadProgress&)> sink;
  std::string what;
  uint64_t total = 0;
  Clock::time_point start, last;
  std::atomic<uint64_t> done{0};
  std::atomic<bool> active{false};
};

State& state() {
  static State s;
  return s;
}

// PRECONDITION: s.mu held.
void emit(State& s, bool finished) {
  if (!s.sink) return;
  LoadProgress p;
  p.what = s.what, p.done = s.done.load(), p.total = s.total, p.finished = finished;
  p.seconds = std::chrono::duration<double>(Clock::now() - s.start).count();
  s.sink(p);
}

}  // namespace

void set_load_progress_sink(std::function<void(const LoadProgress&)> sink) {
  State& s = state();
  std::lock_guard lock(s.mu);
  s.sink = std::move(sink);
}

void load_progress_begin(const std::string& what, uint64_t total) {
  State& s = state();
  std::lock_guard lock(s.mu);
  s.what = what, s.total = total, s.start = s.last = Clock::now();
  s.done = 0, s.active = true;
  emit(s, false);
}

void load_progress_add(uint64_t bytes) {
  State& s = state();
  if (!s.active.load(std::memory_order_relaxed)) return;
  s.done.fetch_add(bytes, std::memory_order_relaxed);
  std::unique_lock lock(s.mu, std::try_to_lock);  // a report a moment late is fine
  if (!lock.owns_lock() || !s.sink) return;
  const auto now = Clock::now();
  if (now - s.last < std::chrono::milliseconds(100)) return;
  s.last = now;
  emit(s, false);
}

void load_progress_end() {
  State& s = state();
  std::lock_guard lock(s.mu);
  if (!s.active) return;
  s.active = false;
  emit(s, true);
}

}  // namespace orchid

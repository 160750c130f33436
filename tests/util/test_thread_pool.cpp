// ThreadPool: every index of every job runs exactly once, whether the workers are still spinning
// from the last job (back-to-back jobs) or asleep (a pause past the spin period), with more
// blocks than threads asked for and with jobs too small to split.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "orchid/util/thread_pool.h"

namespace orchid {
namespace {

TEST(ThreadPool, EveryIndexRunsOnceAcrossSpinningAndSleepingWorkers) {
  ThreadPool pool(4);
  std::vector<std::atomic<int>> hits(1000);
  for (int job = 0; job < 400; ++job) {
    if (job % 100 == 99)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));  // workers sleep
    const int64_t n = 1 + job * 7 % 1000, grain = job % 3 == 0 ? 1 : 300;
    pool.parallel_for(n, grain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) hits[size_t(i)].fetch_add(1);
    });
    for (int64_t i = 0; i < 1000; ++i)
      ASSERT_EQ(hits[size_t(i)].exchange(0), i < n ? 1 : 0) << "job " << job << ", index " << i;
  }
}

TEST(ThreadPool, OneThreadRunsInline) {
  ThreadPool pool(1);
  int64_t sum = 0;
  pool.parallel_for(100, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) sum += i;
  });
  EXPECT_EQ(sum, 4950);
}

}  // namespace
}  // namespace orchid

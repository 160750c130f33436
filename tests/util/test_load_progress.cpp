// util/load_progress: a step reaches the sink at its start (done 0, its total), on the way at most
// every 100 ms, and at its end (finished, every byte added, even when the step's scope is left
// early); bytes added outside a step, or with no sink, go nowhere.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

#include "orchid/util/load_progress.h"

namespace orchid {
namespace {

TEST(LoadProgress, AStepReportsItsStartAndItsBytesAtTheEnd) {
  std::vector<LoadProgress> seen;
  set_load_progress_sink([&](const LoadProgress& p) { seen.push_back(p); });
  load_progress_add(5);  // no step: dropped
  {
    LoadStep step("copying", 1000);
    load_progress_add(300);
    std::this_thread::sleep_for(std::chrono::milliseconds(120));
    load_progress_add(200);  // > 100 ms after the start: reported on the way
    load_progress_add(100);  // within 100 ms of that: not
  }
  set_load_progress_sink({});
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[0].what, "copying");
  EXPECT_EQ(seen[0].done, 0u);
  EXPECT_EQ(seen[0].total, 1000u);
  EXPECT_FALSE(seen[0].finished);
  EXPECT_EQ(seen[1].done, 500u);
  EXPECT_FALSE(seen[1].finished);
  EXPECT_TRUE(seen[2].finished);
  EXPECT_EQ(seen[2].done, 600u);
  EXPECT_GE(seen[2].seconds, 0.1);
  load_progress_add(7);  // after the step: dropped, and no sink to call
}

TEST(LoadProgress, EachStepCountsFromZero) {
  std::vector<LoadProgress> seen;
  set_load_progress_sink([&](const LoadProgress& p) { seen.push_back(p); });
  for (uint64_t n : {40u, 2u}) {
    LoadStep step("step", 100);
    load_progress_add(n);
  }
  set_load_progress_sink({});
  ASSERT_EQ(seen.size(), 4u);
  EXPECT_EQ(seen[1].done, 40u);
  EXPECT_EQ(seen[2].done, 0u);
  EXPECT_EQ(seen[3].done, 2u);
  EXPECT_TRUE(seen[3].finished);
}

}  // namespace
}  // namespace orchid

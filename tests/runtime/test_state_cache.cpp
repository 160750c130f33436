// StateCache bounds: the bytes of the snapshots and their token lists, and the entry count;
// the least recently used entries go first.
#include <gtest/gtest.h>

#include "orchid/backend/scripted/scripted_backend.h"
#include "orchid/runtime/state_cache.h"

namespace orchid {
namespace {

class StateCacheTest : public ::testing::Test {
 protected:
  // A snapshot of a state that consumed `tokens` (the scripted backend keeps the history).
  std::unique_ptr<StateSnapshot> snap_of(const std::vector<int32_t>& tokens) {
    auto st = backend_->new_state(1024);
    EXPECT_TRUE(st.ok());
    std::vector<float> logits;
    EXPECT_TRUE(backend_->forward(**st, tokens, LogitsMode::last, logits).ok());
    return backend_->snapshot(**st);
  }
  std::unique_ptr<Backend> backend_ = make_scripted_backend(64, {{1}}, 0);
};

TEST_F(StateCacheTest, BoundedInEntries) {
  StateCache cache(int64_t(1) << 30, 8);
  for (int32_t i = 0; i < 20; ++i) {
    std::vector<int32_t> t = {i % 64, 1, 2, 3};
    cache.insert(0, t, snap_of(t));
    EXPECT_LE(cache.size(), 8u);
  }
  auto st = backend_->new_state(1024);
  ASSERT_TRUE(st.ok());
  const std::vector<int32_t> newest = {19, 1, 2, 3, 9}, oldest = {0, 1, 2, 3, 9};
  EXPECT_EQ(cache.restore_longest_prefix(*backend_, **st, 0, newest), 4);
  EXPECT_EQ(cache.restore_longest_prefix(*backend_, **st, 0, oldest), 0);  // evicted
}

// Snapshots belong to their slot: a lookup sees only its slot's.
TEST_F(StateCacheTest, LookupsStayInTheirSlot) {
  StateCache cache(int64_t(1) << 30);
  const std::vector<int32_t> a = {1, 2, 3}, b = {1, 2, 3, 4, 5};
  cache.insert(0, a, snap_of(a));
  cache.insert(1, b, snap_of(b));
  const std::vector<int32_t> prompt = {1, 2, 3, 4, 5, 6};
  EXPECT_EQ(cache.longest_prefix(0, prompt), 3);
  EXPECT_EQ(cache.longest_prefix(1, prompt), 5);
  EXPECT_EQ(cache.longest_prefix(2, prompt), 0);
  EXPECT_EQ(cache.size(), 2u);
}

TEST_F(StateCacheTest, BytesCountTheTokenLists) {
  const std::vector<int32_t> t(100, 5);
  auto s = snap_of(t);
  const int64_t snap_bytes = s->bytes();
  StateCache cache(int64_t(1) << 30);
  cache.insert(0, t, std::move(s));
  EXPECT_EQ(cache.bytes(), snap_bytes + int64_t(100 * sizeof(int32_t)));
  // A budget for about two such entries keeps two.
  StateCache small(2 * cache.bytes() + 10);
  for (int32_t i = 0; i < 5; ++i) {
    std::vector<int32_t> u(100, i);
    small.insert(0, u, snap_of(u));
    EXPECT_LE(small.bytes(), 2 * cache.bytes() + 10);
  }
  EXPECT_EQ(small.size(), 2u);
}

}  // namespace
}  // namespace orchid

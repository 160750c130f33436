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

// The host tier, through a backend whose snapshots start "on the device": the scripted
// backend's, wrapped; move_to_host marks them moved and counts the moves.
class TieredBackend final : public Backend {
 public:
  struct Snap final : StateSnapshot {
    std::unique_ptr<StateSnapshot> inner;
    bool device = true;
    int64_t n_past() const override { return inner->n_past(); }
    int64_t bytes() const override { return inner->bytes(); }
    bool on_device() const override { return device; }
  };
  explicit TieredBackend(Backend& inner) : inner_(inner) {}
  std::string name() const override { return "tiered"; }
  int64_t n_vocab() const override { return inner_.n_vocab(); }
  Expected<std::unique_ptr<BackendState>> new_state(int64_t n) override {
    return inner_.new_state(n);
  }
  Status forward(BackendState& st, std::span<const int32_t> t, LogitsMode m,
                 std::vector<float>& logits, int64_t chunk = 0,
                 const CancelCheck& c = {}) override {
    return inner_.forward(st, t, m, logits, chunk, c);
  }
  std::unique_ptr<StateSnapshot> snapshot(const BackendState& st) override {
    auto s = std::make_unique<Snap>();
    s->inner = inner_.snapshot(st);
    return s;
  }
  Status restore(BackendState& st, const StateSnapshot& snap) override {
    return inner_.restore(st, *static_cast<const Snap&>(snap).inner);
  }
  Status move_to_host(StateSnapshot& snap) override {
    auto& s = static_cast<Snap&>(snap);
    if (fail_moves) return err("no host memory");
    if (!s.device) return err("moved twice");
    s.device = false;
    ++moves;
    return {};
  }
  int moves = 0;
  bool fail_moves = false;

 private:
  Backend& inner_;
};

class StateCacheHostTierTest : public StateCacheTest {
 protected:
  std::unique_ptr<StateSnapshot> tiered_snap(const std::vector<int32_t>& tokens) {
    auto st = tiered_.new_state(1024);
    EXPECT_TRUE(st.ok());
    std::vector<float> logits;
    EXPECT_TRUE(tiered_.forward(**st, tokens, LogitsMode::last, logits).ok());
    return tiered_.snapshot(**st);
  }
  // Bytes of one entry of `n` tokens.
  int64_t entry_bytes(int n) {
    const std::vector<int32_t> t(size_t(n), 7);
    return tiered_snap(t)->bytes() + int64_t(n) * int64_t(sizeof(int32_t));
  }
  TieredBackend tiered_{*backend_};
};

// Past the device budget the least recently used device snapshots move to host memory, where a
// lookup still finds them; past the host budget the host tier's oldest go.
TEST_F(StateCacheHostTierTest, EvictedDeviceSnapshotsMoveToHostAndStillHit) {
  const int64_t e = entry_bytes(10);
  StateCache cache(2 * e);
  cache.set_host_tier(&tiered_, 3 * e);
  std::vector<std::vector<int32_t>> convs;
  for (int32_t i = 0; i < 6; ++i) {
    convs.push_back(std::vector<int32_t>(10, 0));
    convs.back()[0] = i;  // six conversations, one snapshot each
    cache.insert(0, convs.back(), tiered_snap(convs.back()));
    EXPECT_LE(cache.bytes(), 2 * e);
    EXPECT_LE(cache.host_bytes(), 3 * e);
  }
  EXPECT_EQ(cache.size(), 5u);  // 2 on the device, 3 in host memory, the oldest dropped
  EXPECT_EQ(cache.host_size(), 3u);
  EXPECT_EQ(tiered_.moves, 4);  // conversations 0-3 moved; 0 then dropped from the host tier
  auto st = tiered_.new_state(1024);
  ASSERT_TRUE(st.ok());
  std::vector<int32_t> next = convs[1];
  next.push_back(5);
  EXPECT_EQ(cache.restore_longest_prefix(tiered_, **st, 0, next), 10);  // from the host tier
  EXPECT_EQ(cache.host_hits(), 1);
  EXPECT_EQ((*st)->n_past(), 10);
  next = convs[5];
  next.push_back(5);
  EXPECT_EQ(cache.restore_longest_prefix(tiered_, **st, 0, next), 10);  // from the device
  EXPECT_EQ(cache.hits(), 2);
  EXPECT_EQ(cache.host_hits(), 1);
  next = convs[0];
  next.push_back(5);
  EXPECT_EQ(cache.restore_longest_prefix(tiered_, **st, 0, next), 0);  // dropped
}

// Without a host tier, or when a move fails, or for snapshots already in host memory (the CPU
// backend's), eviction drops them as before.
TEST_F(StateCacheHostTierTest, EvictionDropsWhenTheHostTierCannotTakeIt) {
  const int64_t e = entry_bytes(10);
  for (int mode = 0; mode < 3; ++mode) {
    StateCache cache(2 * e);
    if (mode > 0) cache.set_host_tier(&tiered_, 8 * e);
    tiered_.fail_moves = mode == 2;
    tiered_.moves = 0;
    for (int32_t i = 0; i < 4; ++i) {
      std::vector<int32_t> t(10, 0);
      t[0] = i;
      // mode 1: the scripted backend's own snapshots, in host memory from the start.
      cache.insert(0, t, mode == 1 ? snap_of(t) : tiered_snap(t));
    }
    EXPECT_EQ(cache.size(), 2u) << "mode " << mode;
    EXPECT_EQ(cache.host_size(), 0u) << "mode " << mode;
    EXPECT_EQ(tiered_.moves, 0) << "mode " << mode;
  }
  tiered_.fail_moves = false;
}

// A host entry that turns out stale is dropped with its bytes; clear() empties both tiers.
TEST_F(StateCacheHostTierTest, CountsStayRightThroughReplacesAndClear) {
  const int64_t e = entry_bytes(10);
  StateCache cache(e);
  cache.set_host_tier(&tiered_, 4 * e);
  std::vector<int32_t> a(10, 1), b(10, 2);
  cache.insert(0, a, tiered_snap(a));
  cache.insert(0, b, tiered_snap(b));  // a moves to host memory
  EXPECT_EQ(cache.host_size(), 1u);
  EXPECT_EQ(cache.host_bytes(), e);
  cache.insert(0, a, tiered_snap(a));  // replaces the host copy of a; b moves
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(cache.host_size(), 1u);
  EXPECT_EQ(cache.bytes(), e);
  EXPECT_EQ(cache.host_bytes(), e);
  cache.clear();
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_EQ(cache.host_bytes(), 0);
  EXPECT_EQ(cache.bytes(), 0);
}

}  // namespace
}  // namespace orchid

// The value-head reorder of llama.cpp's converter, undone (model/gguf_heads.h): the converter's
// forward step, written here from its definition (view [K, R, hd] stored as [R, K, hd]), then
// undo_v_head_reorder gives back the original bytes for several shapes; bad sizes are errors.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "orchid/model/gguf_heads.h"

namespace orchid {
namespace {

// What the converter stores: stored head r·K + k holds original head k·R + r.
std::vector<uint8_t> converter_order(const std::vector<uint8_t>& hf, int K, int R, size_t hb) {
  std::vector<uint8_t> out(hf.size());
  for (int k = 0; k < K; ++k)
    for (int r = 0; r < R; ++r)
      for (size_t b = 0; b < hb; ++b)
        out[(size_t(r) * K + k) * hb + b] = hf[(size_t(k) * R + r) * hb + b];
  return out;
}

TEST(GgufHeads, UndoesTheConvertersReorder) {
  std::mt19937 rng(std::random_device{}());
  struct Shape {
    int K, R;
    size_t hb;
  };
  // Qwen3.6-35B-A3B: 16 key heads, 32 value heads (R = 2), 128 × 2,048 bf16 rows a head.
  for (Shape s : {Shape{16, 2, 128 * 2048 * 2}, Shape{2, 3, 5}, Shape{4, 1, 8}, Shape{1, 4, 3}}) {
    std::vector<uint8_t> hf(size_t(s.K) * s.R * s.hb);
    for (auto& b : hf) b = uint8_t(rng());
    const std::vector<uint8_t> stored = converter_order(hf, s.K, s.R, s.hb);
    std::vector<uint8_t> back(hf.size());
    ASSERT_TRUE(undo_v_head_reorder(stored, back, s.K, s.R, s.hb).ok());
    EXPECT_EQ(back, hf) << s.K << " x " << s.R;
    if (s.R > 1 && s.K > 1) {
      EXPECT_NE(stored, hf) << "the shape moves heads";
    }
  }
  // K = 2, R = 3: stored heads (r0k0, r0k1, r1k0, r1k1, r2k0, r2k1) = HF (0, 3, 1, 4, 2, 5).
  const std::vector<uint8_t> stored = {0, 3, 1, 4, 2, 5};
  std::vector<uint8_t> back(6);
  ASSERT_TRUE(undo_v_head_reorder(stored, back, 2, 3, 1).ok());
  EXPECT_EQ(back, (std::vector<uint8_t>{0, 1, 2, 3, 4, 5}));
}

TEST(GgufHeads, BadSizesAreErrors) {
  std::vector<uint8_t> a(24), b(24), c(23);
  EXPECT_FALSE(undo_v_head_reorder(a, c, 2, 3, 4).ok());
  EXPECT_FALSE(undo_v_head_reorder(c, a, 2, 3, 4).ok());
  EXPECT_FALSE(undo_v_head_reorder(a, b, 2, 3, 5).ok());
  EXPECT_FALSE(undo_v_head_reorder(a, b, 0, 3, 4).ok());
  EXPECT_FALSE(undo_v_head_reorder(a, b, 2, 3, 0).ok());
  EXPECT_FALSE(undo_v_head_reorder(a, std::span<uint8_t>(a), 2, 3, 4).ok()) << "in place";
  EXPECT_TRUE(undo_v_head_reorder(a, b, 2, 3, 4).ok());
}

}  // namespace
}  // namespace orchid

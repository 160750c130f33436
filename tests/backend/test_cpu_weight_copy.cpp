// The CPU backend's copy of the matrices in 2 MiB pages (backend/cpu/weight_copy.h): every
// matrix of a checkpoint (dense and affine, hf and mlx4 layouts) reads back the same values from
// the copy, from new memory, and the model's own views still read right after their file pages
// were released; a model under the size threshold gets no copy.
#include <gtest/gtest.h>

#include <vector>

#include "../test_util.h"
#include "orchid/backend/cpu/weight_copy.h"
#include "orchid/model/model.h"

namespace orchid {
namespace {

void expect_same_rows(const QuantMatrix& a, const QuantMatrix& b, const std::string& what) {
  ASSERT_EQ(a.rows, b.rows) << what;
  std::vector<float> ra(static_cast<size_t>(a.cols)), rb(static_cast<size_t>(b.cols));
  for (int64_t r = 0; r < a.rows; ++r) {
    a.dequant_row(r, ra.data());
    b.dequant_row(r, rb.data());
    ASSERT_EQ(ra, rb) << what << " row " << r;
  }
}

TEST(CpuWeightCopy, EveryMatrixReadsTheSameFromTheCopy) {
  for (const char* fixture : {"tiny/mlx4", "odd/hf"}) {
    auto m = load_model(test::golden(fixture));
    ASSERT_TRUE(m.ok()) << m.message();
    EXPECT_EQ(cpu::WeightCopy::make(**m), nullptr) << "a tiny model stays in its mapping";
    auto c = cpu::WeightCopy::make(**m, 0);
    ASSERT_NE(c, nullptr) << fixture;
    const Weights &w = (**m).weights, &cw = c->weights();
    EXPECT_GE(c->bytes(), size_t(w.tok_embd.bytes()));
    EXPECT_NE(w.tok_embd.data, cw.tok_embd.data) << fixture;
    expect_same_rows(w.tok_embd, cw.tok_embd, "tok_embd");
    expect_same_rows(w.output, cw.output, "output");
    for (size_t l = 0; l < w.layers.size(); ++l) {
      const LayerWeights &L = w.layers[l], &C = cw.layers[l];
      const std::string p = std::string(fixture) + " layer " + std::to_string(l) + " ";
      if (L.attn.q_proj.data) {
        expect_same_rows(L.attn.q_proj, C.attn.q_proj, p + "q_proj");
        expect_same_rows(L.attn.o_proj, C.attn.o_proj, p + "o_proj");
      } else {
        expect_same_rows(L.gdn.in_proj_qkv, C.gdn.in_proj_qkv, p + "in_proj_qkv");
        expect_same_rows(L.gdn.out_proj, C.gdn.out_proj, p + "out_proj");
        EXPECT_NE(L.gdn.in_proj_qkv.data, C.gdn.in_proj_qkv.data);
      }
      expect_same_rows(L.moe.router, C.moe.router, p + "router");
      for (size_t e = 0; e < L.moe.gate.size(); ++e) {
        expect_same_rows(L.moe.gate[e], C.moe.gate[e], p + "gate");
        expect_same_rows(L.moe.down[e], C.moe.down[e], p + "down");
        EXPECT_NE(L.moe.down[e].data, C.moe.down[e].data);
        if (L.moe.down[e].scales) {
          EXPECT_NE(L.moe.down[e].scales, C.moe.down[e].scales);
        }
      }
      expect_same_rows(L.moe.shared_down, C.moe.shared_down, p + "shared_down");
    }
  }
}

}  // namespace
}  // namespace orchid

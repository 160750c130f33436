// Prefill routing on the device (launch_moe_route_sort, and the fp32 router logits) against host
// references: every token's
// top-k (reference_routing: exact selection; weights within 1e-5 relative — fp32 exp and sums),
// the pairs sorted by expert then token, and the tile map covering each expert's run exactly in
// tiles of at most tile_rows. Loads: random, skewed (one expert takes every token, some experts
// none), the shared expert stacked or kept apart; buffers poisoned before each launch.
#include <algorithm>
#include <cmath>

#include "../cuda_test_matrix.h"
#include "../cuda_test_reference.h"
#include "../cuda_test_util.h"
#include "orchid/backend/cuda/prefill/prefill_kernels.h"

namespace orchid {
namespace {

using test::DevBuf;

struct Case {
  int T, E, k, tile_rows;
  bool skewed, stacked;
};

TEST(CudaMoeRouteSort, PairsAndTilesMatchReference) {
  ORCHID_REQUIRE_GPU();
  std::mt19937_64 rng(std::random_device{}());
  for (Case cs : {Case{1, 8, 2, 16, false, true}, Case{37, 5, 3, 16, false, false},
                  Case{300, 256, 8, 64, false, true}, Case{300, 256, 8, 32, true, true},
                  Case{1000, 64, 4, 16, true, false}}) {
    const int slots = cs.k + 1, pairs = cs.T * slots;
    auto logits = test::random_floats(size_t(cs.T) * (cs.E + 1), -3.f, 3.f, rng);
    if (cs.skewed)  // expert 1 tops every token; experts ≥ E/2 never make the top k
      for (int t = 0; t < cs.T; ++t) {
        float* row = logits.data() + size_t(t) * (cs.E + 1);
        row[1] = 10.f;
        for (int e = cs.E / 2; e < cs.E; ++e) row[e] = -20.f - float(e);
      }
    const int max_tiles = pairs / cs.tile_rows + cs.E + 1;
    const size_t np = size_t(pairs), ne = size_t(cs.E + 1), nt_max = size_t(max_tiles);
    DevBuf<float> dl(logits), pw(np), sw(np);
    DevBuf<int> pt(np), ps(np), sel(np), counts(ne), offsets(ne), n_tiles(size_t{1});
    DevBuf<int> te(nt_max), tb(nt_max), tend(nt_max);
    cuda::MoeRouting r;
    r.T = cs.T, r.n_expert = cs.E, r.top_k = cs.k, r.shared_stacked = cs.stacked;
    r.logits = dl.get(), r.pair_token = pt.get(), r.pair_slot = ps.get(), r.pair_w = pw.get();
    r.sel = sel.get(), r.sel_w = sw.get(), r.counts = counts.get(), r.offsets = offsets.get();
    r.tile_rows = cs.tile_rows, r.max_tiles = max_tiles, r.n_tiles = n_tiles.get();
    r.tile_expert = te.get(), r.tile_begin = tb.get(), r.tile_end = tend.get();
    ASSERT_TRUE(cuda::launch_moe_route_sort(r, nullptr).ok());
    ORCHID_CUDA_OK(cudaDeviceSynchronize());

    // Reference: (expert, token, slot, weight) sorted by expert, then token.
    struct Pair {
      int e, t, s;
      double w;
    };
    std::vector<Pair> want;
    for (int t = 0; t < cs.T; ++t) {
      std::vector<float> row(logits.begin() + size_t(t) * (cs.E + 1),
                             logits.begin() + size_t(t + 1) * (cs.E + 1));
      auto ref = test::reference_routing(row, cs.E, cs.k);
      for (int s = 0; s < slots; ++s)
        if (cs.stacked || s < cs.k) want.push_back({ref.sel[size_t(s)], t, s, ref.w[size_t(s)]});
    }
    std::stable_sort(want.begin(), want.end(), [](const Pair& a, const Pair& b) {
      return a.e != b.e ? a.e < b.e : a.t < b.t;
    });
    const auto got_t = pt.host(), got_s = ps.host();
    const auto got_w = pw.host();
    for (size_t j = 0; j < want.size(); ++j) {
      ASSERT_EQ(got_t[j], want[j].t) << "T " << cs.T << " pair " << j;
      ASSERT_EQ(got_s[j], want[j].s) << "T " << cs.T << " pair " << j;
      ASSERT_NEAR(got_w[j], want[j].w, 1e-5 * want[j].w + 1e-7) << "T " << cs.T << " pair " << j;
    }
    // Tiles: in expert order, each within one expert's run, covering all pairs once.
    const int nt = n_tiles.host()[0];
    const auto e_of = te.host(), b_of = tb.host(), end_of = tend.host();
    ASSERT_LE(nt, max_tiles);
    int next = 0;
    for (int i = 0; i < nt; ++i) {
      ASSERT_EQ(b_of[size_t(i)], next) << "tile " << i;
      ASSERT_GT(end_of[size_t(i)], b_of[size_t(i)]);
      ASSERT_LE(end_of[size_t(i)] - b_of[size_t(i)], cs.tile_rows);
      for (int j = b_of[size_t(i)]; j < end_of[size_t(i)]; ++j)
        ASSERT_EQ(want[size_t(j)].e, e_of[size_t(i)]) << "tile " << i << " pair " << j;
      next = end_of[size_t(i)];
    }
    ASSERT_EQ(next, int(want.size()));
  }
}

// The prefill router's fp32 logits (x̂ normed from the residual, weights dequantised exactly):
// within 1e-5 of Σ|x̂·w| per logit (fp32 rounding of 2,048 products and the norm).
TEST(CudaRouterPrefill, LogitsMatchReference) {
  ORCHID_REQUIRE_GPU();
  std::mt19937_64 rng(std::random_device{}());
  struct Shape {
    int T, E, H;
    cuda::DevFormat fmt;
  };
  for (Shape sh :
       {Shape{1, 256, 2048, cuda::DevFormat::q8}, Shape{70, 256, 2048, cuda::DevFormat::q8},
        Shape{37, 5, 128, cuda::DevFormat::q4}, Shape{5, 8, 64, cuda::DevFormat::bf16}}) {
    test::HostMatrix router(sh.fmt, sh.E, sh.H, rng), gate(sh.fmt, 1, sh.H, rng);
    auto h = test::random_floats(size_t(sh.T) * sh.H, -4.f, 4.f, rng);
    auto norm = test::random_floats(size_t(sh.H), 0.5f, 1.5f, rng);
    const test::DeviceMatrix dr(router), dg(gate);
    DevBuf<float> dh(h), dn(norm), out(size_t(sh.T) * (sh.E + 1));
    ASSERT_TRUE(cuda::launch_router_logits_f32(dh.get(), dn.get(), 1e-6f, sh.T, sh.H, dr.m, dg.m,
                                               out.get(), nullptr)
                    .ok());
    ORCHID_CUDA_OK(cudaDeviceSynchronize());
    const auto got = out.host();
    for (int t = 0; t < sh.T; ++t) {
      std::vector<float> row(h.begin() + size_t(t) * sh.H, h.begin() + size_t(t + 1) * sh.H);
      const auto xh = test::x_hat(row, &norm, 1e-6f);
      for (int o = 0; o <= sh.E; ++o) {
        const float* w = o < sh.E ? router.w.data() + size_t(o) * sh.H : gate.w.data();
        double want = 0, mag = 0;
        for (int c = 0; c < sh.H; ++c)
          want += xh[size_t(c)] * w[c], mag += std::fabs(xh[size_t(c)] * w[c]);
        ASSERT_NEAR(got[size_t(t) * (sh.E + 1) + o], want, 1e-5 * mag + 1e-6)
            << "T " << sh.T << " token " << t << " logit " << o;
      }
    }
  }
}

}  // namespace
}  // namespace orchid

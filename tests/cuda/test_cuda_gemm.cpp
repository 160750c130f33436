// The prefill GEMMs (gemm.cu, expert_gemm.cu) against double-precision references on fresh random
// inputs: dense q4 / q8 / bf16 projections (odd row counts, masked columns, strided A, residual
// adds, the dequantisation ablation) and the routed experts (gate/up, down, combine) over
// host-built tile maps of 16, 32, 64 and 128 rows.
//
// Bound (per output element, against Σ|a·w| over its terms): the weight dequantised to fp16 is
// within 2^-11 relative (s·q + b rounded once; bf16 → fp16 is exact), products of fp16 are exact
// in fp32, and the fp32 accumulation adds at most K / 16 roundings of 2^-24 (≤ 2^-16 relative for
// K ≤ 2^12): |err| ≤ 2^-10 · Σ|a·w| suffices. Scales, biases or weights below fp16's normal range
// (2^-14) keep only 2^-25 absolute precision, at most 257 · 2^-25 < 2^-16 per weight (a q8 code
// times the scale's error): + 2^-16 · Σ|a|.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "cuda_test_matrix.h"
#include "cuda_test_util.h"
#include "orchid/backend/cuda/prefill_kernels.h"

namespace orchid {
namespace {

using cuda::DevFormat;
using test::DevBuf;
using test::DeviceMatrix;
using test::HostMatrix;

uint16_t to_f16(float x) {
  return _cvtss_sh(x, _MM_FROUND_TO_NEAREST_INT);
}
double f16(uint16_t h) {
  return _cvtsh_ss(h);
}
double silu(double x) {
  return x / (1 + std::exp(-x));
}

constexpr double kRel = 1.0 / 1024, kAbs = 1.0 / 65536;

// Random fp16 values in (-1, 1), [rows, ld] with columns ≥ cols NaN (read = caught).
std::vector<uint16_t> random_f16(int rows, int cols, int ld, std::mt19937_64& rng) {
  std::vector<uint16_t> v(size_t(rows) * ld, 0x7e00);
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) v[size_t(r) * ld + c] = to_f16(d(rng));
  return v;
}

// The same codes with (scale, bias) per `group` columns instead of 64.
void regroup(HostMatrix& h, int group, std::mt19937_64& rng) {
  const int bits = h.fmt == DevFormat::q4 ? 4 : 8, per = 32 / bits, groups = h.cols / group;
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  h.group = group;
  h.sb.assign(size_t(h.rows) * groups, 0u);
  for (auto& p : h.sb) p = test::bf16_pair(u(rng) * 0.02f, u(rng) * 0.1f);
  for (int r = 0; r < h.rows; ++r)
    for (int c = 0; c < h.cols; ++c) {
      const uint32_t q =
          (h.words[size_t(r) * h.units * 4 + c / per] >> (bits * (c % per))) & ((1u << bits) - 1);
      const uint32_t p = h.sb[size_t(r) * groups + c / group];
      h.w[size_t(r) * h.cols + c] =
          bf16_to_f32(uint16_t(p)) * float(q) + bf16_to_f32(uint16_t(p >> 16));
    }
}

// A random q4 / q8 matrix with any group (a power-of-two number of units) and any whole number
// of units per row; HostMatrix alone makes group-64 matrices of whole groups of 64.
HostMatrix quantised(DevFormat f, int rows, int cols, int group, std::mt19937_64& rng) {
  if (f == DevFormat::bf16 || (group == 64 && cols % 64 == 0))
    return HostMatrix(f, rows, cols, rng);
  HostMatrix h(f, rows, 64, rng);
  h.cols = cols, h.units = cols / cuda::unit_elems(f);
  h.words.resize(size_t(rows) * h.units * 4);
  for (auto& w : h.words) w = uint32_t(rng());
  h.w.assign(size_t(rows) * cols, 0.f);
  regroup(h, group, rng);
  return h;
}

// Σ a·w and Σ|a·w|, Σ|a| over k for a row of A (fp16 bits) and a row of W.
struct Dot {
  double v = 0, mag = 0, amag = 0;
};
Dot dot(const uint16_t* a, const float* w, int k) {
  Dot d;
  for (int i = 0; i < k; ++i) {
    const double x = f16(a[i]), t = x * w[i];
    d.v += t, d.mag += std::fabs(t), d.amag += std::fabs(x);
  }
  return d;
}
double bound(const Dot& d) {
  return kRel * d.mag + kAbs * d.amag;
}

// Restores the fused-dequantisation switch and the scratch on scope exit.
struct DequantMode {
  bool saved = cuda::gemm_fused_dequant_enabled();
  explicit DequantMode(bool fused) { cuda::set_gemm_fused_dequant_enabled(fused); }
  ~DequantMode() {
    cuda::set_gemm_fused_dequant_enabled(saved);
    cuda::set_gemm_dequant_scratch(nullptr, 0);
  }
};

// ---- Dense projections ------------------------------------------------------------------------

enum class Add { none, separate, in_place };

struct GemmCase {
  DevFormat fmt;
  int m, n, k, group;
  int lda_pad;  // A row stride = k + lda_pad (padding NaN)
  Add add;
  bool fused;
};

void run_gemm(const GemmCase& cs) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE(testing::Message() << "seed " << seed << ", M " << cs.m << " N " << cs.n << " K "
                                  << cs.k << " group " << cs.group << " add " << int(cs.add)
                                  << (cs.fused ? " fused" : " unfused"));
  std::mt19937_64 rng(seed);
  HostMatrix w = quantised(cs.fmt, cs.n, cs.k, cs.group, rng);
  DeviceMatrix dw(w);
  const int lda = cs.k + cs.lda_pad, ldc = cs.n + 3;
  auto a = random_f16(cs.m, cs.k, lda, rng);
  auto add = test::random_floats(size_t(cs.m) * ldc, -4.f, 4.f, rng);
  DevBuf<uint16_t> da(a);
  DevBuf<float> dc(size_t(cs.m) * ldc), dadd(add);
  DequantMode mode(cs.fused);
  DevBuf<uint16_t> scratch(size_t(cs.n) * cs.k);
  if (!cs.fused) cuda::set_gemm_dequant_scratch(scratch.get(), int64_t(scratch.size()));

  cuda::GemmParams p;
  p.w = dw.m, p.a = da.get(), p.lda = lda, p.m = cs.m, p.c = dc.get(), p.ldc = ldc;
  if (cs.add == Add::separate) p.add = dadd.get();
  if (cs.add == Add::in_place) {
    ORCHID_CUDA_OK(cudaMemcpy(dc.get(), add.data(), add.size() * 4, cudaMemcpyHostToDevice));
    p.add = dc.get();
  } else {
    ORCHID_CUDA_OK(cudaMemset(dc.get(), 0xff, dc.bytes()));
  }
  const Status st = cuda::launch_gemm(p, nullptr);
  ASSERT_TRUE(st.ok()) << st.message();
  ORCHID_CUDA_OK(cudaDeviceSynchronize());
  const auto c = dc.host();

  // Large shapes: every 7th row and the last (the tiles are uniform across rows).
  int bad = 0;
  double worst = 0;
  const bool sample = double(cs.m) * cs.n * cs.k > 4e8;
  for (int r = 0; r < cs.m; ++r) {
    if (sample && r % 7 != 0 && r != cs.m - 1) continue;
    for (int n = 0; n < cs.n; ++n) {
      Dot d = dot(&a[size_t(r) * lda], &w.w[size_t(n) * cs.k], cs.k);
      const double base = cs.add == Add::none ? 0.0 : add[size_t(r) * ldc + n];
      const double want = d.v + base, got = c[size_t(r) * ldc + n];
      const double tol = bound(d) + 0x1p-23 * std::fabs(want);
      const double ex = std::fabs(got - want) / tol;
      if (!(ex <= 1) && bad++ < 5)
        ADD_FAILURE() << "row " << r << " col " << n << ": " << got << " vs " << want << " (bound "
                      << tol << ")";
      worst = std::max(worst, ex);
    }
    // Columns past N (the ldc padding) are never written.
    for (int n = cs.n; n < ldc; ++n) {
      const float got = c[size_t(r) * ldc + n];
      const float want = cs.add == Add::in_place ? add[size_t(r) * ldc + n] : NAN;
      if (!(std::isnan(want) ? std::isnan(got) : got == want) && bad++ < 5)
        ADD_FAILURE() << "row " << r << " padding col " << n << " written: " << got;
    }
  }
  EXPECT_EQ(bad, 0) << "worst error / bound " << worst;
}

TEST(CudaGemm, Q4RowCountsMatchReference) {
  ORCHID_REQUIRE_GPU();
  for (int m : {1, 7, 64, 100, 257}) run_gemm({DevFormat::q4, m, 192, 320, 64, 0, Add::none, true});
}

TEST(CudaGemm, Q4GroupsAndStridesMatchReference) {
  ORCHID_REQUIRE_GPU();
  run_gemm({DevFormat::q4, 100, 192, 512, 32, 8, Add::none, true});
  run_gemm({DevFormat::q4, 100, 192, 512, 128, 24, Add::none, true});
  run_gemm({DevFormat::q4, 33, 160, 96, 32, 0, Add::none, true});  // K tail: half a k-step
}

TEST(CudaGemm, Q4ModelShapesMatchReference) {
  ORCHID_REQUIRE_GPU();
  run_gemm({DevFormat::q4, 100, 2048, 2048, 64, 0, Add::separate, true});
  run_gemm({DevFormat::q4, 257, 2048, 2048, 64, 0, Add::in_place, true});
  // Enough tiles for the 128-row variant.
  run_gemm({DevFormat::q4, 2100, 4096, 256, 64, 0, Add::none, true});
}

TEST(CudaGemm, Q8RouterShapeMatchesReference) {
  ORCHID_REQUIRE_GPU();
  for (int m : {1, 100, 257}) run_gemm({DevFormat::q8, m, 257, 2048, 64, 0, Add::none, true});
  run_gemm({DevFormat::q8, 64, 192, 320, 32, 8, Add::separate, true});
}

TEST(CudaGemm, Bf16MatchesReference) {
  ORCHID_REQUIRE_GPU();
  for (int m : {1, 7, 100}) run_gemm({DevFormat::bf16, m, 200, 72, 0, 8, Add::none, true});
  run_gemm({DevFormat::bf16, 64, 256, 1040, 0, 0, Add::in_place, true});
}

TEST(CudaGemm, AddsTheResidual) {
  ORCHID_REQUIRE_GPU();
  for (Add add : {Add::separate, Add::in_place}) {
    run_gemm({DevFormat::q4, 7, 192, 320, 64, 0, add, true});
    run_gemm({DevFormat::q8, 100, 257, 2048, 64, 0, add, true});
  }
}

TEST(CudaGemm, DequantAblationMatchesReference) {
  ORCHID_REQUIRE_GPU();
  for (int m : {1, 100, 257}) {
    run_gemm({DevFormat::q4, m, 192, 320, 64, 0, Add::in_place, false});
    run_gemm({DevFormat::q8, m, 257, 2048, 64, 0, Add::none, false});
  }
  run_gemm({DevFormat::q4, 100, 192, 512, 128, 8, Add::separate, false});
  run_gemm({DevFormat::bf16, 100, 200, 72, 0, 8, Add::none, false});
}

// The ablation's first half alone: every element equals fp16(s·q + b) of the host's value.
TEST(CudaGemm, DequantF16MatchesHost) {
  ORCHID_REQUIRE_GPU();
  std::mt19937_64 rng(std::random_device{}());
  for (DevFormat f : {DevFormat::q4, DevFormat::q8, DevFormat::bf16}) {
    HostMatrix w(f, 70, 320, rng);
    DeviceMatrix dw(w);
    DevBuf<uint16_t> out(size_t(70) * 320);
    ASSERT_TRUE(cuda::launch_dequant_f16(dw.m, out.get(), nullptr).ok());
    const auto got = out.host();
    int bad = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const double want = w.w[i];
      if (!(std::fabs(f16(got[i]) - want) <= 0x1p-11 * std::fabs(want) + 0x1p-16) && bad++ < 5)
        ADD_FAILURE() << "format " << int(f) << " element " << i << ": " << f16(got[i]) << " vs "
                      << want;
    }
  }
}

TEST(CudaGemm, RejectsUnsupportedShapes) {
  ORCHID_REQUIRE_GPU();
  std::mt19937_64 rng(std::random_device{}());
  HostMatrix w(DevFormat::q4, 64, 128, rng);
  DeviceMatrix dw(w);
  DevBuf<uint16_t> a(size_t(16) * 128);
  DevBuf<float> c(size_t(16) * 64);
  cuda::GemmParams p;
  p.w = dw.m, p.a = a.get(), p.lda = 128, p.m = 16, p.c = c.get(), p.ldc = 64;
  ASSERT_TRUE(cuda::launch_gemm(p, nullptr).ok());
  cuda::GemmParams bad = p;
  bad.lda = 100;  // not a multiple of 8
  EXPECT_FALSE(cuda::launch_gemm(bad, nullptr).ok());
  bad = p, bad.ldc = 32;
  EXPECT_FALSE(cuda::launch_gemm(bad, nullptr).ok());
  bad = p, bad.w.group = 48;
  EXPECT_FALSE(cuda::launch_gemm(bad, nullptr).ok());
  bad = p, bad.a = nullptr;
  EXPECT_FALSE(cuda::launch_gemm(bad, nullptr).ok());
  DequantMode mode(false);  // no scratch set
  EXPECT_FALSE(cuda::launch_gemm(p, nullptr).ok());
  ORCHID_CUDA_OK(cudaDeviceSynchronize());
}

// ---- Routed experts ---------------------------------------------------------------------------

// A host routing of T tokens over E routed experts + the shared one (stacked as expert E): expert
// 0 gets no token, expert 1 every token, the others skewed loads (expert i drawn ∝ i²). Pairs are
// sorted by expert, then token; tiles of ≤ tile_rows pairs of one expert.
struct HostRouting {
  int T, E, k, tile_rows, max_tiles;
  std::vector<int> pair_token, pair_slot, pair_expert, tile_expert, tile_begin, tile_end;
  std::vector<float> pair_w;

  HostRouting(int t, int e, int top_k, int rows, std::mt19937_64& rng)
      : T(t), E(e), k(top_k), tile_rows(rows) {
    std::vector<std::vector<int>> sel(static_cast<size_t>(T));  // [T][slot] expert
    std::vector<double> weight(static_cast<size_t>(E));
    for (int i = 2; i < E; ++i) weight[size_t(i)] = double(i) * i;
    for (auto& s : sel) {
      s.push_back(1);
      std::vector<double> wt = weight;
      while (int(s.size()) < k) {
        std::discrete_distribution<int> d(wt.begin(), wt.end());
        const int x = d(rng);
        s.push_back(x);
        wt[size_t(x)] = 0;
      }
      std::shuffle(s.begin(), s.end(), rng);
      s.push_back(E);  // slot k: the shared expert
    }
    std::uniform_real_distribution<float> u(0.05f, 1.f);
    for (int x = 0; x <= E; ++x) {
      const int begin = int(pair_token.size());
      for (int tok = 0; tok < T; ++tok)
        for (int s = 0; s <= k; ++s)
          if (sel[size_t(tok)][size_t(s)] == x)
            pair_token.push_back(tok), pair_slot.push_back(s), pair_expert.push_back(x),
                pair_w.push_back(u(rng));
      for (int b = begin; b < int(pair_token.size()); b += tile_rows) {
        tile_expert.push_back(x), tile_begin.push_back(b);
        tile_end.push_back(std::min(b + tile_rows, int(pair_token.size())));
      }
    }
    max_tiles = T * (k + 1) / tile_rows + E + 1;
  }
  int pairs() const { return int(pair_token.size()); }
};

// The tile map on the device; the tile arrays past n_tiles stay poisoned (-1).
struct DeviceRouting {
  DevBuf<int> token, slot, n_tiles, expert, begin, end;
  DevBuf<float> w;
  cuda::MoeRouting r;
  explicit DeviceRouting(const HostRouting& h)
      : token(h.pair_token),
        slot(h.pair_slot),
        n_tiles(std::vector<int>{int(h.tile_expert.size())}),
        expert(size_t(h.max_tiles)),
        begin(size_t(h.max_tiles)),
        end(size_t(h.max_tiles)),
        w(h.pair_w) {
    const size_t n = h.tile_expert.size() * sizeof(int);
    cudaMemcpy(expert.get(), h.tile_expert.data(), n, cudaMemcpyHostToDevice);
    cudaMemcpy(begin.get(), h.tile_begin.data(), n, cudaMemcpyHostToDevice);
    cudaMemcpy(end.get(), h.tile_end.data(), n, cudaMemcpyHostToDevice);
    r.T = h.T, r.n_expert = h.E, r.top_k = h.k;
    r.pair_token = token.get(), r.pair_slot = slot.get(), r.pair_w = w.get();
    r.tile_rows = h.tile_rows, r.max_tiles = h.max_tiles, r.n_tiles = n_tiles.get();
    r.tile_expert = expert.get(), r.tile_begin = begin.get(), r.tile_end = end.get();
  }
};

struct ExpertCase {
  DevFormat fmt;
  int T, E, k, n_embd, n_ff, tile_rows;
  int down_group;  // q4/q8 group of the down matrix (n_ff columns)
};

void run_experts(const ExpertCase& cs) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE(testing::Message() << "seed " << seed << ", format " << int(cs.fmt) << " T " << cs.T
                                  << " E " << cs.E << " k " << cs.k << " n_embd " << cs.n_embd
                                  << " n_ff " << cs.n_ff << " tile rows " << cs.tile_rows);
  std::mt19937_64 rng(seed);
  const int S = cs.k + 1, H = cs.n_embd, F = cs.n_ff;
  HostRouting hr(cs.T, cs.E, cs.k, cs.tile_rows, rng);
  ASSERT_EQ(hr.pairs(), cs.T * S);
  HostMatrix gate(cs.fmt, (cs.E + 1) * F, H, rng), up(cs.fmt, (cs.E + 1) * F, H, rng),
      down = quantised(cs.fmt, (cs.E + 1) * H, F, cs.down_group, rng);
  DeviceMatrix dgate(gate), dup(up), ddown(down);
  DeviceRouting dr(hr);
  const auto x = random_f16(cs.T, H, H, rng);
  const auto h0 = test::random_floats(size_t(cs.T) * H, -2.f, 2.f, rng);
  DevBuf<uint16_t> dx(x), dact(size_t(hr.pairs()) * F);
  DevBuf<float> dslot(size_t(cs.T) * S * H), dh(h0);

  cuda::ExpertGateUpParams gp;
  gp.gate = dgate.m, gp.up = dup.m, gp.n_ff = F, gp.x = dx.get(), gp.r = &dr.r;
  gp.act = dact.get();
  Status st = cuda::launch_expert_gate_up(gp, nullptr);
  ASSERT_TRUE(st.ok()) << st.message();
  cuda::ExpertDownParams dp;
  dp.down = ddown.m, dp.n_embd = H, dp.n_ff = F, dp.act = dact.get(), dp.r = &dr.r;
  dp.slot_out = dslot.get();
  st = cuda::launch_expert_down(dp, nullptr);
  ASSERT_TRUE(st.ok()) << st.message();
  const auto slot_out = dslot.host();  // before the combine (same stream: ordered)
  st = cuda::launch_moe_combine(dslot.get(), cs.T, S, H, dh.get(), nullptr);
  ASSERT_TRUE(st.ok()) << st.message();
  ORCHID_CUDA_OK(cudaDeviceSynchronize());
  const auto act = dact.host();
  const auto h = dh.host();

  // act = fp16(silu(g) · u): g and u within their GEMM bounds Bg, Bu (silu' ≤ 1.1), then the
  // fp16 rounding (2^-11 relative, 2^-25 absolute below the normal range).
  int bad = 0;
  for (int j = 0; j < hr.pairs(); ++j) {
    const int tok = hr.pair_token[size_t(j)], ex = hr.pair_expert[size_t(j)];
    for (int i = 0; i < F; ++i) {
      const size_t row = size_t(ex) * F + i;
      const Dot g = dot(&x[size_t(tok) * H], &gate.w[row * H], H);
      const Dot u = dot(&x[size_t(tok) * H], &up.w[row * H], H);
      const double want = silu(g.v) * u.v, got = f16(act[size_t(j) * F + i]);
      const double tol = 1.1 * bound(g) * (std::fabs(u.v) + bound(u)) +
                         std::fabs(silu(g.v)) * bound(u) + 0x1p-11 * std::fabs(want) + 0x1p-24;
      if (!(std::fabs(got - want) <= tol) && bad++ < 5)
        ADD_FAILURE() << "act pair " << j << " (token " << tok << ", expert " << ex << ") col " << i
                      << ": " << got << " vs " << want << " (bound " << tol << ")";
    }
  }
  // slot_out[t, s] = w · down_e(act) from the device's act rows.
  std::vector<double> want_slot(slot_out.size(), NAN), mag_slot(slot_out.size(), 0);
  for (int j = 0; j < hr.pairs(); ++j) {
    const int ex = hr.pair_expert[size_t(j)];
    const size_t o = (size_t(hr.pair_token[size_t(j)]) * S + hr.pair_slot[size_t(j)]) * H;
    const double pw = hr.pair_w[size_t(j)];
    for (int n = 0; n < H; ++n) {
      const Dot d = dot(&act[size_t(j) * F], &down.w[(size_t(ex) * H + n) * F], F);
      const double want = pw * d.v, got = slot_out[o + n];
      const double tol = pw * bound(d) + 0x1p-23 * std::fabs(want);
      want_slot[o + n] = want, mag_slot[o + n] = std::fabs(want);
      if (!(std::fabs(got - want) <= tol) && bad++ < 5)
        ADD_FAILURE() << "slot_out token " << hr.pair_token[size_t(j)] << " slot "
                      << hr.pair_slot[size_t(j)] << " col " << n << ": " << got << " vs " << want
                      << " (bound " << tol << ")";
    }
  }
  // Combine: h0 + Σ_s slot_out (the device's), S fp32 roundings of the running sum.
  for (int t = 0; t < cs.T; ++t)
    for (int n = 0; n < H; ++n) {
      double want = h0[size_t(t) * H + n], mag = std::fabs(want);
      for (int s = 0; s < S; ++s) {
        const double v = slot_out[(size_t(t) * S + s) * H + n];
        want += v, mag += std::fabs(v);
      }
      const double got = h[size_t(t) * H + n], tol = S * 0x1p-24 * mag + 1e-30;
      if (!(std::fabs(got - want) <= tol) && bad++ < 5)
        ADD_FAILURE() << "h token " << t << " col " << n << ": " << got << " vs " << want;
    }
  EXPECT_EQ(bad, 0);
}

TEST(CudaExperts, Q4TileRowsMatchReference) {
  ORCHID_REQUIRE_GPU();
  for (int rows : {16, 32, 64, 128}) run_experts({DevFormat::q4, 100, 8, 3, 320, 160, rows, 32});
  // Several full tiles per expert (expert 1 and the shared one take all 300 tokens).
  for (int rows : {64, 128}) run_experts({DevFormat::q4, 300, 4, 2, 256, 128, rows, 64});
}

TEST(CudaExperts, Q4ModelShapeMatchesReference) {
  ORCHID_REQUIRE_GPU();
  run_experts({DevFormat::q4, 48, 16, 8, 2048, 512, 64, 64});
  run_experts({DevFormat::q4, 48, 16, 8, 2048, 512, 16, 64});
}

TEST(CudaExperts, Q8AndBf16MatchReference) {
  ORCHID_REQUIRE_GPU();
  run_experts({DevFormat::q8, 70, 6, 2, 256, 192, 32, 64});
  run_experts({DevFormat::q8, 70, 6, 2, 256, 192, 64, 32});
  run_experts({DevFormat::q8, 150, 6, 2, 256, 192, 128, 64});
  run_experts({DevFormat::bf16, 70, 6, 2, 264, 136, 32, 0});
  run_experts({DevFormat::bf16, 70, 6, 2, 264, 136, 16, 0});
}

TEST(CudaExperts, RejectsBadRouting) {
  ORCHID_REQUIRE_GPU();
  std::mt19937_64 rng(std::random_device{}());
  HostRouting hr(8, 4, 2, 16, rng);
  DeviceRouting dr(hr);
  HostMatrix gate(DevFormat::q4, 5 * 64, 128, rng);
  DeviceMatrix dg(gate);
  DevBuf<uint16_t> x(size_t(8) * 128), act(size_t(hr.pairs()) * 64);
  cuda::ExpertGateUpParams p;
  p.gate = dg.m, p.up = dg.m, p.n_ff = 64, p.x = x.get(), p.r = &dr.r, p.act = act.get();
  ASSERT_TRUE(cuda::launch_expert_gate_up(p, nullptr).ok());
  dr.r.tile_rows = 48;
  EXPECT_FALSE(cuda::launch_expert_gate_up(p, nullptr).ok());
  dr.r.tile_rows = 16;
  p.n_ff = 128;  // the stacked matrix is too short for 5 experts of 128 rows
  EXPECT_FALSE(cuda::launch_expert_gate_up(p, nullptr).ok());
  EXPECT_FALSE(cuda::launch_moe_combine(nullptr, 8, 3, 128, nullptr, nullptr).ok());
  ORCHID_CUDA_OK(cudaDeviceSynchronize());
}

}  // namespace
}  // namespace orchid

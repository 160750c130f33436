// The prefill GEMMs (prefill/dense_gemm.cu, prefill/expert_gemm.cu) against double-precision
// references on fresh random inputs, on both paths: dense q4 / q8 / bf16 projections (odd row
// counts, masked columns, strided A, residual adds, groups of 32 / 64 / 128, the dequantisation
// ablation) and the routed experts (gate/up, down, combine) over host-built tile maps of 16, 32, 64
// and 128 rows; and the row-wise producers' hi + lo operands.
//
// fp16 path bound (per output element, against Σ|a·w| over its terms): the weight dequantised to
// fp16 is within 2^-11 relative (s·q + b rounded once; bf16 → fp16 is exact), products of fp16 are
// exact in fp32, and the fp32 accumulation adds at most K / 16 roundings of 2^-24 (≤ 2^-16 relative
// for K ≤ 2^12): |err| ≤ 2^-10 · Σ|a·w| suffices. Scales, biases or weights below fp16's normal
// range (2^-14) keep only 2^-25 absolute precision, at most 257 · 2^-25 < 2^-16 per weight (a q8
// code times the scale's error): + 2^-16 · Σ|a|.
//
// Exact path bound: A = hi + lo is x within 2^-22 |x| + 2^-25 (2^-25: lo below fp16's normal
// range), code products are exact, and the rest is fp32 roundings: per group the tensor cores' sums
// over 2·G/16 sub-steps, the fold's two fmas, K/G folds. Against mag = Σ_k |x_k| (|s·q_k| + |b|)
// (the two terms the fold adds; Σ|x·w| for bf16), 2^-20 · mag covers them with room: the roundings
// have random signs and act on sums ~√K smaller than mag (every rounding of a full-magnitude sum in
// one direction would be ~(K/8) · 2^-24 · mag). Plus 2^-24 · Σ|w| for the 2^-25 of small x, and for
// bf16 2^-24 · Σ|x| (weights below 2^-14 keep 2^-25 absolute in fp16). Dropping lo leaves
// ~2^-12 · √K · |x·w|, caught at every K here; the rel. L2 of a whole output (≤ 1e-5; the fp16
// path's is ~1e-3) is checked too.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <deque>
#include <numeric>
#include <optional>

#include "../cuda_test_matrix.h"
#include "../cuda_test_util.h"
#include "orchid/backend/cuda/prefill/prefill_kernels.h"

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

// fp32 activations in (-1, 1) times 8, 1, 2^-3 or 2^-6 by row (small rows put lo below fp16's
// normal range), [rows, ld], and their fp16 operands as the producers split them: hi = fp16(x),
// lo = fp16(x − hi). Columns ≥ cols NaN. The fp16 path's rows have hi only (x = hi).
struct SplitRows {
  std::vector<float> x;
  std::vector<uint16_t> hi, lo;
};
SplitRows random_split(int rows, int cols, int ld, std::mt19937_64& rng) {
  const size_t n = size_t(rows) * ld;
  SplitRows s{std::vector<float>(n, NAN), std::vector<uint16_t>(n, 0x7e00),
              std::vector<uint16_t>(n, 0x7e00)};
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) {
      const size_t i = size_t(r) * ld + c;
      s.x[i] = d(rng) * std::ldexp(1.f, 3 - 3 * (r % 4));
      s.hi[i] = to_f16(s.x[i]);
      s.lo[i] = to_f16(s.x[i] - float(f16(s.hi[i])));
    }
  return s;
}
SplitRows random_rows(bool exact, int rows, int cols, int ld, std::mt19937_64& rng) {
  if (exact) return random_split(rows, cols, ld, rng);
  return {{}, random_f16(rows, cols, ld, rng), {0}};
}

// A host matrix's weights as the exact path applies them: s·q + b (exact in double) and its
// magnitude |s·q| + |b| (bf16: the weight and |w|).
struct ExactWeights {
  bool bf16;
  std::vector<double> v;
  std::vector<float> mag;
  explicit ExactWeights(const HostMatrix& h)
      : bf16(h.fmt == DevFormat::bf16), v(h.w.size()), mag(h.w.size()) {
    const int bits = h.fmt == DevFormat::q4 ? 4 : 8, per = 32 / bits;
    for (int r = 0; r < h.rows; ++r)
      for (int c = 0; c < h.cols; ++c) {
        const size_t i = size_t(r) * h.cols + c;
        if (bf16) {
          v[i] = h.w[i], mag[i] = std::fabs(h.w[i]);
          continue;
        }
        const uint32_t q =
            (h.words[size_t(r) * h.units * 4 + c / per] >> (bits * (c % per))) & ((1u << bits) - 1);
        const uint32_t p = h.sb[size_t(r) * (h.cols / h.group) + c / h.group];
        const double sq = double(bf16_to_f32(uint16_t(p))) * q, b = bf16_to_f32(uint16_t(p >> 16));
        v[i] = sq + b, mag[i] = float(std::fabs(sq) + std::fabs(b));
      }
  }
};

// Σ x·w over k for row `row` of w, with the exact bound's sums.
struct ExactDot {
  double v = 0, mag = 0, wsum = 0, xsum = 0;
};
ExactDot exact_dot(const float* x, const ExactWeights& w, int64_t row, int k) {
  ExactDot d;
  const double* wv = &w.v[size_t(row) * k];
  const float* wm = &w.mag[size_t(row) * k];
  for (int i = 0; i < k; ++i) {
    d.v += double(x[i]) * wv[i];
    d.mag += std::fabs(x[i]) * double(wm[i]);
    d.wsum += std::fabs(wv[i]), d.xsum += std::fabs(x[i]);
  }
  return d;
}
double exact_bound(const ExactDot& d, bool bf16) {
  return 0x1p-20 * d.mag + 0x1p-24 * d.wsum + (bf16 ? 0x1p-24 * d.xsum : 0.0);
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

// A's group sums on the device (launch_group_sums; lo may be null) into sums, made here: rows of
// 2 · group_sums_half(k) values.
void group_sums(std::optional<DevBuf<uint16_t>>& sums, const uint16_t* hi, const uint16_t* lo,
                int rows, int k, int lda) {
  sums.emplace(size_t(std::max(rows, 1)) * 2 * cuda::group_sums_half(k));
  const Status st = cuda::launch_group_sums(hi, lo, rows, k, lda, sums->get(), nullptr);
  ASSERT_TRUE(st.ok()) << st.message();
}

// ---- Dense projections ------------------------------------------------------------------------

enum class Add { none, separate, in_place };

struct GemmCase {
  DevFormat fmt;
  int m, n, k, group;
  int lda_pad;  // A row stride = k + lda_pad (padding NaN)
  Add add;
  bool fused;
  bool exact = false;  // A as hi + lo (A_lo set): the exact path
  // A's group sums given: q4 in groups of 64 then takes the scaled codes where the
  // warp-specialised tiles run (elsewhere the sums go unused).
  bool sums = false;
};

void run_gemm(const GemmCase& cs) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE(testing::Message() << "seed " << seed << ", format " << int(cs.fmt) << " M " << cs.m
                                  << " N " << cs.n << " K " << cs.k << " group " << cs.group
                                  << " add " << int(cs.add) << (cs.fused ? " fused" : " unfused")
                                  << (cs.exact ? " exact" : " fp16") << (cs.sums ? " sums" : ""));
  std::mt19937_64 rng(seed);
  HostMatrix w = quantised(cs.fmt, cs.n, cs.k, cs.group, rng);
  DeviceMatrix dw(w);
  std::optional<ExactWeights> ew;
  if (cs.exact) ew.emplace(w);
  // C's row stride N + 4 for even M, N + 3 for odd M, so the cases take both of the epilogue's
  // forms: an even stride (even N with even M, odd N with odd M) its 8-byte column pairs, odd N
  // then ending in a lone column; an odd stride its one-float stores. Past N never written.
  const int lda = cs.k + cs.lda_pad, ldc = cs.n + (cs.m % 2 == 0 ? 4 : 3);
  const SplitRows a = random_rows(cs.exact, cs.m, cs.k, lda, rng);
  auto add = test::random_floats(size_t(cs.m) * ldc, -4.f, 4.f, rng);
  DevBuf<uint16_t> da(a.hi), dlo(a.lo);
  DevBuf<float> dc(size_t(cs.m) * ldc), dadd(add);
  DequantMode mode(cs.fused);
  DevBuf<uint16_t> scratch(size_t(cs.n) * cs.k);
  if (!cs.fused) cuda::set_gemm_dequant_scratch(scratch.get(), int64_t(scratch.size()));

  cuda::GemmParams p;
  p.w = dw.m, p.a = da.get(), p.lda = lda, p.m = cs.m, p.c = dc.get(), p.ldc = ldc;
  if (cs.exact) p.a_lo = dlo.get();
  std::optional<DevBuf<uint16_t>> dsums;
  if (cs.sums) {
    group_sums(dsums, da.get(), cs.exact ? dlo.get() : nullptr, cs.m, cs.k, lda);
    p.a_sums = dsums->get();
  }
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
  double worst = 0, err2 = 0, ref2 = 0;
  const bool sample = double(cs.m) * cs.n * cs.k > 4e8;
  for (int r = 0; r < cs.m; ++r) {
    if (sample && r % 7 != 0 && r != cs.m - 1) continue;
    for (int n = 0; n < cs.n; ++n) {
      double prod, tol;
      if (cs.exact) {
        const ExactDot d = exact_dot(&a.x[size_t(r) * lda], *ew, n, cs.k);
        prod = d.v, tol = exact_bound(d, ew->bf16);
      } else {
        const Dot d = dot(&a.hi[size_t(r) * lda], &w.w[size_t(n) * cs.k], cs.k);
        prod = d.v, tol = bound(d);
      }
      const double base = cs.add == Add::none ? 0.0 : add[size_t(r) * ldc + n];
      const double want = prod + base, got = c[size_t(r) * ldc + n];
      tol += 0x1p-23 * std::fabs(want);
      const double ex = std::fabs(got - want) / tol;
      if (!(ex <= 1) && bad++ < 5)
        ADD_FAILURE() << "row " << r << " col " << n << ": " << got << " vs " << want << " (bound "
                      << tol << ")";
      worst = std::max(worst, ex);
      err2 += (got - want) * (got - want), ref2 += prod * prod;
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
  // The exact path's aggregate bound, where there are enough outputs for it to mean something:
  // a single dot product (M = N = 1) that happens to cancel to near zero has a large relative
  // error while within its per-element bound above (seen: 2.1e-5 at M 1 N 1 K 2048).
  if (cs.exact && int64_t(cs.m) * cs.n >= 64) {
    EXPECT_LE(std::sqrt(err2 / ref2), 1e-5) << "rel. L2 of the product";
  }
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

// ---- The exact path (A as hi + lo, integer codes folded per group) ------------------------------

TEST(CudaGemmExact, Q4GroupsAndRowCountsMatchReference) {
  ORCHID_REQUIRE_GPU();
  for (int group : {32, 64, 128})
    for (int m : {1, 7, 100, 257})
      run_gemm({DevFormat::q4, m, 192, 512, group, 8, Add::none, true, true});
  run_gemm({DevFormat::q4, 33, 160, 96, 32, 0, Add::none, true, true});  // K tail: half a k-step
}

TEST(CudaGemmExact, Q8GroupsMatchReference) {
  ORCHID_REQUIRE_GPU();
  for (int group : {32, 64, 128})
    for (int m : {1, 100, 257})
      run_gemm({DevFormat::q8, m, 257, 1024, group, 0, Add::separate, true, true});
}

// The prefill router's two GEMMs: 256 expert rows, and the shared expert's one-row gate.
TEST(CudaGemmExact, RouterShapesMatchReference) {
  ORCHID_REQUIRE_GPU();
  for (int m : {1, 100, 1030}) {
    run_gemm({DevFormat::q8, m, 256, 2048, 64, 0, Add::none, true, true});
    run_gemm({DevFormat::q8, m, 1, 2048, 64, 0, Add::none, true, true});
  }
}

TEST(CudaGemmExact, Bf16MatchesReference) {
  ORCHID_REQUIRE_GPU();
  for (int m : {1, 7, 100}) run_gemm({DevFormat::bf16, m, 200, 72, 0, 8, Add::none, true, true});
  run_gemm({DevFormat::bf16, 64, 256, 1040, 0, 0, Add::in_place, true, true});
}

// Model widths, and enough tiles for the 128-row variant (both with each group size). The
// dequantisation switch does not apply to the exact path.
TEST(CudaGemmExact, ModelShapesMatchReference) {
  ORCHID_REQUIRE_GPU();
  run_gemm({DevFormat::q4, 257, 2048, 2048, 64, 0, Add::in_place, true, true});
  for (int group : {32, 64, 128}) {
    run_gemm({DevFormat::q4, 2100, 4096, 256, group, 0, Add::none, true, true});
    run_gemm({DevFormat::q8, 2100, 4096, 256, group, 0, Add::separate, false, true});
  }
}

// The warp-specialised tiles (sm_90a; other tests run them too wherever they take a launch): odd
// row counts, K from one k-step (fewer than the 4 stages) to 64, N not a multiple of 128,
// residual adds, A by the copy engine (rows past M arrive as zeros); persistent blocks of several
// tiles (M = 2,100 and 1,000: their stages and barrier phases carry over from tile to tile), from
// one k-step a tile on; other groups and formats keep the other tiles.
TEST(CudaGemmExact, WarpSpecialisedMatchesReference) {
  ORCHID_REQUIRE_GPU();
  if (!cuda::ws_tiles_supported()) GTEST_SKIP() << "no sm_90a device: no warp-specialised tiles";
  for (int m : {1, 7, 65, 130, 257})
    for (int k : {512, 2048, 4096})
      run_gemm({DevFormat::q4, m, 192, k, 64, 8, Add::none, true, true});
  for (int k : {64, 128, 192, 256, 320})
    run_gemm({DevFormat::q4, 130, 320, k, 64, 0, Add::separate, true, true});
  run_gemm({DevFormat::q4, 257, 2048, 2048, 64, 0, Add::in_place, true, true});
  run_gemm({DevFormat::q4, 2100, 4096, 256, 64, 0, Add::none, true, true});
  run_gemm({DevFormat::q4, 2100, 4096, 64, 64, 0, Add::none, true, true});
  run_gemm({DevFormat::q4, 1000, 1500, 320, 64, 8, Add::separate, true, true});
  run_gemm({DevFormat::q4, 100, 192, 512, 128, 8, Add::none, true, true});
  run_gemm({DevFormat::q8, 100, 257, 1024, 64, 0, Add::separate, true, true});
}

// ---- The scaled codes (s·(q − 8) in fp16, the biases against A's group sums) -----------------

// launch_group_sums against the host, every element of a row's two blocks (hi: R_hi twice, then
// zeros; lo: R_lo, then zeros; the poison must go): R_hi + R_lo within 2^-20 of Σ|·| / 64 (fp32
// sums of 64 terms, then the split's 2^-22) plus 2^-25 of Σ (hi + lo) / 64, with and without lo;
// 1 to 64 groups (padding of every length), strided rows. Bad shapes are refused.
TEST(CudaGemmScaled, GroupSumsMatchHost) {
  ORCHID_REQUIRE_GPU();
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  for (const auto [rows, k, pad] :
       {std::array{1, 64, 0}, {7, 192, 8}, {130, 512, 0}, {33, 2048, 16}, {5, 4096, 0}})
    for (bool with_lo : {true, false}) {
      SCOPED_TRACE(testing::Message() << rows << " × " << k << (with_lo ? " hi + lo" : " hi"));
      const int lda = k + pad, half = cuda::group_sums_half(k), G = k / 64;
      const SplitRows a = random_split(rows, k, lda, rng);
      DevBuf<uint16_t> dh(a.hi), dl(a.lo);
      DevBuf<uint16_t> sums(std::vector<uint16_t>(size_t(rows) * 2 * half, 0x7e00));
      const Status st = cuda::launch_group_sums(dh.get(), with_lo ? dl.get() : nullptr, rows, k,
                                                lda, sums.get(), nullptr);
      ASSERT_TRUE(st.ok()) << st.message();
      const auto s = sums.host();
      int bad = 0;
      for (int r = 0; r < rows; ++r) {
        const uint16_t* sh = &s[size_t(r) * 2 * half];
        const uint16_t* sl = sh + half;
        for (int c = 0; c < half; ++c) {
          bool ok;
          if (c < G) {
            double want = 0, mag = 0;
            for (int i = 64 * c; i < 64 * c + 64; ++i) {
              const size_t e = size_t(r) * lda + i;
              const double v = f16(a.hi[e]) + (with_lo ? f16(a.lo[e]) : 0.0);
              want += v, mag += std::fabs(v);
            }
            want /= 64, mag /= 64;
            ok = sh[G + c] == sh[c] &&
                 std::fabs(f16(sh[c]) + f16(sl[c]) - want) <= 0x1p-20 * mag + 0x1p-25;
          } else {
            ok = sl[c] == 0 && (c < 2 * G || sh[c] == 0);
          }
          if (!ok && bad++ < 5)
            ADD_FAILURE() << "row " << r << " column " << c << ": hi " << f16(sh[c]) << " lo "
                          << f16(sl[c]);
        }
      }
      EXPECT_EQ(bad, 0);
    }
  DevBuf<uint16_t> x(size_t(4) * 256), out(size_t(4) * 256);
  EXPECT_FALSE(cuda::launch_group_sums(x.get(), nullptr, 4, 96, 128, out.get(), nullptr).ok());
  EXPECT_FALSE(cuda::launch_group_sums(x.get(), nullptr, 4, 128, 64, out.get(), nullptr).ok());
  EXPECT_FALSE(cuda::launch_group_sums(x.get() + 4, nullptr, 4, 64, 64, out.get(), nullptr).ok());
  EXPECT_FALSE(cuda::launch_group_sums(x.get(), nullptr, 4, 64, 64, nullptr, nullptr).ok());
  ORCHID_CUDA_OK(cudaDeviceSynchronize());
}

// The scaled codes on the warp-specialised tiles (sm_90a), exact (two passes) and on A_hi alone:
// row counts around the tile, K from one k-step (two steps with the bias, fewer than the stages)
// to 64 (two bias steps), N not a multiple of 128, residual adds, A by the copy engine (rows past
// M arrive as zeros); persistent blocks of several tiles (M = 2,100 and 1,000: stages and barrier
// phases carry over, bias steps included). Other groups and formats keep their tiles with the sums
// given.
TEST(CudaGemmScaled, MatchesReference) {
  ORCHID_REQUIRE_GPU();
  if (!cuda::ws_tiles_supported()) GTEST_SKIP() << "no sm_90a device: no warp-specialised tiles";
  for (bool exact : {true, false}) {
    for (int m : {1, 7, 65, 130, 257})
      for (int k : {64, 512, 4096})
        run_gemm({DevFormat::q4, m, 192, k, 64, 8, Add::none, true, exact, true});
    for (int k : {128, 192, 320, 2048})
      run_gemm({DevFormat::q4, 130, 320, k, 64, 0, Add::separate, true, exact, true});
    run_gemm({DevFormat::q4, 257, 2048, 2048, 64, 0, Add::in_place, true, exact, true});
    run_gemm({DevFormat::q4, 2100, 4096, 256, 64, 0, Add::none, true, exact, true});
    run_gemm({DevFormat::q4, 2100, 4096, 64, 64, 0, Add::none, true, exact, true});
    run_gemm({DevFormat::q4, 1000, 1500, 320, 64, 8, Add::separate, true, exact, true});
  }
  run_gemm({DevFormat::q4, 100, 192, 512, 128, 8, Add::none, true, true, true});
  run_gemm({DevFormat::q8, 100, 257, 1024, 64, 0, Add::separate, true, true, true});
}

// The cases above pass on the fold too; here the same launch with A's group sums (the scaled
// codes) and without (the fold): both within the exact bound of each other's sums (2 · 2^-20 of
// Σ|x|(|s·q| + |b|), via run_gemm's bound on each), but not the same bits — the forms sum in
// different orders, so equal outputs would mean the scaled tiles never ran.
TEST(CudaGemmScaled, DiffersFromTheFoldInRoundingOnly) {
  ORCHID_REQUIRE_GPU();
  if (!cuda::ws_tiles_supported()) GTEST_SKIP() << "no sm_90a device: no warp-specialised tiles";
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  const int m = 300, n = 512, k = 1024;
  const HostMatrix w = quantised(DevFormat::q4, n, k, 64, rng);
  const DeviceMatrix dw(w);
  const SplitRows a = random_split(m, k, k, rng);
  DevBuf<uint16_t> da(a.hi), dlo(a.lo);
  std::optional<DevBuf<uint16_t>> sums;
  group_sums(sums, da.get(), dlo.get(), m, k, k);
  std::vector<float> got[2];
  for (bool scaled : {true, false}) {
    DevBuf<float> dc(size_t(m) * n);
    cuda::GemmParams p;
    p.w = dw.m, p.a = da.get(), p.a_lo = dlo.get(), p.lda = k, p.m = m;
    p.a_sums = scaled ? sums->get() : nullptr;
    p.c = dc.get(), p.ldc = n;
    const Status st = cuda::launch_gemm(p, nullptr);
    ASSERT_TRUE(st.ok()) << st.message();
    got[scaled ? 0 : 1] = dc.host();
  }
  const ExactWeights ew(w);
  int differ = 0, bad = 0;
  for (int r = 0; r < m; ++r)
    for (int c = 0; c < n; ++c) {
      const size_t i = size_t(r) * n + c;
      const ExactDot d = exact_dot(&a.x[size_t(r) * k], ew, c, k);
      const double tol = 2 * (exact_bound(d, false) + 0x1p-23 * std::fabs(d.v));
      differ += got[0][i] != got[1][i];
      if (!(std::fabs(double(got[0][i]) - got[1][i]) <= tol) && bad++ < 5)
        ADD_FAILURE() << "row " << r << " col " << c << ": " << got[0][i] << " vs " << got[1][i];
    }
  EXPECT_EQ(bad, 0);
  EXPECT_GT(differ, 0) << "the scaled codes gave the fold's very bits";
}

// A q8 matrix in groups of 64 as its two q4 halves (launch_split_q8, the prefill router's form):
// the halves' codes and (scale, bias) words as the host makes them, bit for bit, and the exact
// GEMM of the halves with each column pair summed (on the warp-specialised tiles where they run)
// against the q8 matrix's exact weights, within the exact path's bound.
TEST(CudaGemmExact, SplitQ8HalvesMatchQ8) {
  ORCHID_REQUIRE_GPU();
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  for (const auto [m, n, k] : {std::array{1, 2, 64}, {130, 256, 2048}, {257, 6, 512}}) {
    SCOPED_TRACE(testing::Message() << "M " << m << " N " << n << " K " << k);
    const HostMatrix q = quantised(DevFormat::q8, n, k, 64, rng);
    const DeviceMatrix dq(q);
    DevBuf<uint32_t> hw(size_t(n) * k / 4), hsb(size_t(2) * n * (k / 64));
    Status st = cuda::launch_split_q8(dq.m, hw.get(), hsb.get(), nullptr);
    ASSERT_TRUE(st.ok()) << st.message();
    const auto w = hw.host(), sb = hsb.host();
    int bad = 0;
    for (int r = 0; r < n; ++r)
      for (int e = 0; e < k; ++e) {
        const uint32_t code = q.words[size_t(r) * q.units * 4 + e / 4] >> (8 * (e % 4)) & 0xffu;
        for (int h = 0; h < 2; ++h) {
          const uint32_t want = h == 0 ? code >> 4 : code & 0xfu;
          const uint32_t got = w[size_t(2 * r + h) * (k / 8) + e / 8] >> (4 * (e % 8)) & 0xfu;
          if (got != want && bad++ < 5)
            ADD_FAILURE() << "row " << r << " half " << h << " element " << e << ": " << got;
        }
      }
    for (int r = 0; r < n; ++r)
      for (int g = 0; g < k / 64; ++g) {
        const uint32_t v = q.sb[size_t(r) * (k / 64) + g];
        float s;
        const uint32_t sbits = (v & 0xffffu) << 16;
        std::memcpy(&s, &sbits, 4);
        s *= 16.f;
        uint32_t s16;
        std::memcpy(&s16, &s, 4);
        const uint32_t want_hi = (v & 0xffff0000u) | s16 >> 16, want_lo = v & 0xffffu;
        if ((sb[size_t(2 * r) * (k / 64) + g] != want_hi ||
             sb[size_t(2 * r + 1) * (k / 64) + g] != want_lo) &&
            bad++ < 5)
          ADD_FAILURE() << "row " << r << " group " << g << ": scale words differ";
      }
    EXPECT_EQ(bad, 0);

    cuda::DevMatrix halves{hw.get(), hsb.get(), 2 * n, k, k / 32, 64, DevFormat::q4};
    ASSERT_TRUE(cuda::set_scaled_code_exp(halves, nullptr).ok());
    const ExactWeights ew(q);
    const SplitRows a = random_split(m, k, k, rng);
    DevBuf<uint16_t> da(a.hi), dlo(a.lo);
    DevBuf<float> dc(size_t(m) * (n + 1));
    std::optional<DevBuf<uint16_t>> sums;
    group_sums(sums, da.get(), dlo.get(), m, k, k);
    // The fold, then the scaled codes (the prefill's form where the launch fills the GPU).
    for (bool scaled : {false, true}) {
      SCOPED_TRACE(scaled ? "scaled codes" : "fold");
      ORCHID_CUDA_OK(cudaMemset(dc.get(), 0xff, dc.bytes()));
      cuda::GemmParams p;
      p.w = halves, p.a = da.get(), p.a_lo = dlo.get(), p.lda = k, p.m = m;
      p.c = dc.get(), p.ldc = n + 1, p.pair_sum = true;
      if (scaled) p.a_sums = sums->get();
      st = cuda::launch_gemm(p, nullptr);
      ASSERT_TRUE(st.ok()) << st.message();
      const auto c = dc.host();
      for (int r = 0; r < m; ++r) {
        for (int j = 0; j < n; ++j) {
          const ExactDot d = exact_dot(&a.x[size_t(r) * k], ew, j, k);
          const double tol = exact_bound(d, false) + 0x1p-23 * std::fabs(d.v);
          const double got = c[size_t(r) * (n + 1) + j];
          if (!(std::fabs(got - d.v) <= tol) && bad++ < 5)
            ADD_FAILURE() << "row " << r << " col " << j << ": " << got << " vs " << d.v;
        }
        if (!std::isnan(c[size_t(r) * (n + 1) + n]) && bad++ < 5)
          ADD_FAILURE() << "row " << r << ": the padding column was written";
      }
      EXPECT_EQ(bad, 0);
    }
  }
  // An odd row count cannot pair.
  const DeviceMatrix odd_w(quantised(DevFormat::q4, 3, 64, 64, rng));
  DevBuf<uint16_t> x(64), x_lo(64);
  DevBuf<float> y(4);
  cuda::GemmParams odd;
  odd.w = odd_w.m, odd.a = x.get(), odd.a_lo = x_lo.get(), odd.lda = 64, odd.m = 1;
  odd.c = y.get(), odd.ldc = 4, odd.pair_sum = true;
  const Status refused = cuda::launch_gemm(odd, nullptr);
  EXPECT_FALSE(refused.ok());
  EXPECT_NE(refused.message().find("pair"), std::string::npos) << refused.message();
}

// Products of one A with several matrices in one grouped launch (the warp-specialised tiles walk
// every product's tiles; column counts of one partial tile, several, and under a tile) give the
// very bits of one launch each, on the fold and on the scaled codes (without those tiles the
// group runs one launch each); a group whose products do not share A is refused.
TEST(CudaGemmExact, GroupMatchesOneLaunchEach) {
  ORCHID_REQUIRE_GPU();
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  const int k = 512;
  const std::array<int, 4> ns = {320, 32, 1024, 48};
  for (int m : {1, 130, 700})
    for (bool with_sums : {false, true}) {  // the fold, the scaled codes
      SCOPED_TRACE(testing::Message() << "M " << m << (with_sums ? " scaled codes" : " fold"));
      const SplitRows a = random_split(m, k, k, rng);
      DevBuf<uint16_t> da(a.hi), dlo(a.lo);
      std::optional<DevBuf<uint16_t>> sums;
      if (with_sums) group_sums(sums, da.get(), dlo.get(), m, k, k);
      std::deque<DeviceMatrix> w;  // deque: neither type moves
      std::deque<DevBuf<float>> one, grouped;
      std::vector<cuda::GemmParams> ps;
      for (int n : ns) {
        w.emplace_back(quantised(DevFormat::q4, n, k, 64, rng));
        one.emplace_back(size_t(m) * n), grouped.emplace_back(size_t(m) * n);
      }
      for (size_t j = 0; j < ns.size(); ++j) {
        cuda::GemmParams p;
        p.w = w[j].m, p.a = da.get(), p.a_lo = dlo.get(), p.lda = k, p.m = m;
        p.c = one[j].get(), p.ldc = ns[j];
        if (with_sums) p.a_sums = sums->get();
        const Status st = cuda::launch_gemm(p, nullptr);
        ASSERT_TRUE(st.ok()) << st.message();
        p.c = grouped[j].get();
        ps.push_back(p);
      }
      for (auto& g : grouped) ORCHID_CUDA_OK(cudaMemset(g.get(), 0xff, g.bytes()));
      const Status st = cuda::launch_gemm_group(ps, nullptr);
      ASSERT_TRUE(st.ok()) << st.message();
      for (size_t j = 0; j < ns.size(); ++j)
        EXPECT_EQ(one[j].host(), grouped[j].host()) << "product " << j;
    }
  std::vector<cuda::GemmParams> mixed(2);
  const DeviceMatrix w(quantised(DevFormat::q4, 64, k, 64, rng));
  DevBuf<uint16_t> a1(size_t(4) * k), a2(size_t(4) * k);
  DevBuf<float> c(256);
  for (auto& p : mixed) p.w = w.m, p.a = a1.get(), p.a_lo = a2.get(), p.lda = k, p.m = 4;
  mixed[0].c = c.get(), mixed[1].c = c.get(), mixed[0].ldc = mixed[1].ldc = 64;
  mixed[1].a = a2.get();
  const Status refused = cuda::launch_gemm_group(mixed, nullptr);
  EXPECT_FALSE(refused.ok());
  EXPECT_NE(refused.message().find("share A"), std::string::npos) << refused.message();
}

TEST(CudaGemmExact, RejectsSmallGroupsAndMisalignedRemainders) {
  ORCHID_REQUIRE_GPU();
  std::mt19937_64 rng(std::random_device{}());
  HostMatrix w = quantised(DevFormat::q8, 64, 128, 16, rng);
  DeviceMatrix dw(w);
  DevBuf<uint16_t> a(size_t(16) * 128), lo(size_t(16) * 128 + 8);
  DevBuf<float> c(size_t(16) * 64);
  cuda::GemmParams p;
  p.w = dw.m, p.a = a.get(), p.lda = 128, p.m = 16, p.c = c.get(), p.ldc = 64;
  ASSERT_TRUE(cuda::launch_gemm(p, nullptr).ok());  // groups of 16 on the fp16 path
  p.a_lo = lo.get();
  EXPECT_FALSE(cuda::launch_gemm(p, nullptr).ok());
  HostMatrix w64 = quantised(DevFormat::q8, 64, 128, 64, rng);
  DeviceMatrix dw64(w64);
  p.w = dw64.m;
  EXPECT_TRUE(cuda::launch_gemm(p, nullptr).ok());
  p.a_lo = lo.get() + 4;  // 8 bytes off
  EXPECT_FALSE(cuda::launch_gemm(p, nullptr).ok());
  ORCHID_CUDA_OK(cudaDeviceSynchronize());
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
  int down_group;       // q4/q8 group of the down matrix (n_ff columns)
  bool exact = false;   // x and act as hi + lo
  int gate_group = 64;  // q4/q8 group of gate and up (n_embd columns)
  // x's and act's group sums given: the scaled codes on the warp-specialised tiles where they run
  // (q4 128-row tiles in groups of 64).
  bool sums = false;
};

void run_experts(const ExpertCase& cs) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE(testing::Message() << "seed " << seed << ", format " << int(cs.fmt) << " T " << cs.T
                                  << " E " << cs.E << " k " << cs.k << " n_embd " << cs.n_embd
                                  << " n_ff " << cs.n_ff << " tile rows " << cs.tile_rows
                                  << " groups " << cs.gate_group << "/" << cs.down_group
                                  << (cs.exact ? " exact" : " fp16") << (cs.sums ? " sums" : ""));
  std::mt19937_64 rng(seed);
  const int S = cs.k + 1, H = cs.n_embd, F = cs.n_ff;
  HostRouting hr(cs.T, cs.E, cs.k, cs.tile_rows, rng);
  ASSERT_EQ(hr.pairs(), cs.T * S);
  HostMatrix gate = quantised(cs.fmt, (cs.E + 1) * F, H, cs.gate_group, rng),
             up = quantised(cs.fmt, (cs.E + 1) * F, H, cs.gate_group, rng),
             down = quantised(cs.fmt, (cs.E + 1) * H, F, cs.down_group, rng);
  DeviceMatrix dgate(gate), dup(up), ddown(down);
  std::optional<ExactWeights> egate, eup, edown;
  if (cs.exact) egate.emplace(gate), eup.emplace(up), edown.emplace(down);
  DeviceRouting dr(hr);
  const SplitRows x = random_rows(cs.exact, cs.T, H, H, rng);
  const auto h0 = test::random_floats(size_t(cs.T) * H, -2.f, 2.f, rng);
  const size_t act_n = cs.exact ? size_t(hr.pairs()) * F : 1;
  DevBuf<uint16_t> dx(x.hi), dx_lo(x.lo), dact(size_t(hr.pairs()) * F), dact_lo(act_n);
  DevBuf<float> dslot(size_t(cs.T) * S * H), dh(h0);

  cuda::ExpertGateUpParams gp;
  gp.gate = dgate.m, gp.up = dup.m, gp.n_ff = F, gp.x = dx.get(), gp.r = &dr.r;
  gp.act = dact.get();
  if (cs.exact) gp.x_lo = dx_lo.get(), gp.act_lo = dact_lo.get();
  std::optional<DevBuf<uint16_t>> x_sums, act_sums;
  if (cs.sums) {
    group_sums(x_sums, dx.get(), cs.exact ? dx_lo.get() : nullptr, cs.T, H, H);
    gp.x_sums = x_sums->get();
  }
  Status st = cuda::launch_expert_gate_up(gp, nullptr);
  ASSERT_TRUE(st.ok()) << st.message();
  cuda::ExpertDownParams dp;
  dp.down = ddown.m, dp.n_embd = H, dp.n_ff = F, dp.act = dact.get(), dp.r = &dr.r;
  if (cs.exact) dp.act_lo = dact_lo.get();
  if (cs.sums) {
    group_sums(act_sums, dact.get(), cs.exact ? dact_lo.get() : nullptr, hr.pairs(), F, F);
    dp.act_sums = act_sums->get();
  }
  dp.slot_out = dslot.get();
  st = cuda::launch_expert_down(dp, nullptr);
  ASSERT_TRUE(st.ok()) << st.message();
  const auto slot_out = dslot.host();  // before the combine (same stream: ordered)
  st = cuda::launch_moe_combine(dslot.get(), cs.T, S, H, dh.get(), nullptr);
  ASSERT_TRUE(st.ok()) << st.message();
  ORCHID_CUDA_OK(cudaDeviceSynchronize());
  const auto act = dact.host(), act_lo = dact_lo.host();
  const auto h = dh.host();

  // act = silu(g) · u (saturated at ±65,504): g and u within their GEMM bounds Bg, Bu (silu'
  // ≤ 1.1), then fp16's rounding (2^-11 relative, 2^-25 absolute below the normal range), or the
  // exact path's hi + lo (2^-22, 2^-25) and its fp32 epilogue (expf, three roundings): 2^-20.
  int bad = 0;
  std::vector<float> act_x(act.size());  // what the down GEMM multiplies (exact: hi + lo)
  for (size_t i = 0; i < act.size(); ++i)
    act_x[i] = float(f16(act[i]) + (cs.exact ? f16(act_lo[i]) : 0.0));
  for (int j = 0; j < hr.pairs(); ++j) {
    const int tok = hr.pair_token[size_t(j)], ex = hr.pair_expert[size_t(j)];
    for (int i = 0; i < F; ++i) {
      const size_t row = size_t(ex) * F + i;
      double g, u, bg, bu;
      if (cs.exact) {
        const ExactDot dg = exact_dot(&x.x[size_t(tok) * H], *egate, int64_t(row), H);
        const ExactDot du = exact_dot(&x.x[size_t(tok) * H], *eup, int64_t(row), H);
        g = dg.v, u = du.v, bg = exact_bound(dg, egate->bf16), bu = exact_bound(du, eup->bf16);
      } else {
        const Dot dg = dot(&x.hi[size_t(tok) * H], &gate.w[row * H], H);
        const Dot du = dot(&x.hi[size_t(tok) * H], &up.w[row * H], H);
        g = dg.v, u = du.v, bg = bound(dg), bu = bound(du);
      }
      // act is stored saturated to fp16's range (both paths); clamping is 1-Lipschitz, so the
      // bound below holds for the clamped value too.
      const double want = std::clamp(silu(g) * u, -65504.0, 65504.0),
                   got = act_x[size_t(j) * F + i];
      const double tol = 1.1 * bg * (std::fabs(u) + bu) + std::fabs(silu(g)) * bu +
                         (cs.exact ? 0x1p-20 : 0x1p-11) * std::fabs(want) + 0x1p-24;
      if (!(std::fabs(got - want) <= tol) && bad++ < 5)
        ADD_FAILURE() << "act pair " << j << " (token " << tok << ", expert " << ex << ") col " << i
                      << ": " << got << " vs " << want << " (bound " << tol << ")";
    }
  }
  // slot_out[t, s] = w · down_e(act) from the device's act rows.
  for (int j = 0; j < hr.pairs(); ++j) {
    const int ex = hr.pair_expert[size_t(j)];
    const size_t o = (size_t(hr.pair_token[size_t(j)]) * S + hr.pair_slot[size_t(j)]) * H;
    const double pw = hr.pair_w[size_t(j)];
    for (int n = 0; n < H; ++n) {
      double prod, b;
      if (cs.exact) {
        const ExactDot d = exact_dot(&act_x[size_t(j) * F], *edown, int64_t(ex) * H + n, F);
        prod = d.v, b = exact_bound(d, edown->bf16);
      } else {
        const Dot d = dot(&act[size_t(j) * F], &down.w[(size_t(ex) * H + n) * F], F);
        prod = d.v, b = bound(d);
      }
      const double want = pw * prod, got = slot_out[o + n];
      const double tol = pw * b + 0x1p-23 * std::fabs(want);
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

TEST(CudaExpertsExact, TileRowsAndGroupsMatchReference) {
  ORCHID_REQUIRE_GPU();
  for (int rows : {16, 32, 64, 128})
    run_experts({DevFormat::q4, 100, 8, 3, 320, 160, rows, 32, true, 64});
  for (int rows : {64, 128}) {
    run_experts({DevFormat::q4, 300, 4, 2, 256, 128, rows, 128, true, 32});
    run_experts({DevFormat::q4, 300, 4, 2, 256, 128, rows, 64, true, 128});
  }
}

TEST(CudaExpertsExact, Q8Bf16AndModelWidthsMatchReference) {
  ORCHID_REQUIRE_GPU();
  for (int rows : {16, 32, 64, 128}) {
    run_experts({DevFormat::q8, 150, 6, 2, 256, 192, rows, 32, true, 128});
    run_experts({DevFormat::bf16, 70, 6, 2, 264, 136, rows, 0, true, 0});
  }
  run_experts({DevFormat::q4, 48, 4, 3, 2048, 512, 64, 64, true, 64});
}

// The warp-specialised tiles on the experts' 128-row tiles (other tests run them too wherever they
// take a launch): expert 1 and the shared one take every token (several full tiles), expert 0
// none; partial column tiles (n_ff 192, n_embd 320); a single token; the model's widths;
// persistent blocks of several tiles (2,000 tokens on 8 experts); A by the copy engine where a
// tile's rows are consecutive tokens or pairs (down: rows past a tile's end are another expert's
// or zeros; the shared expert's gate/up) and by cp.async where they are gathered (the routed
// experts' gate/up); and a down matrix in groups of 32, left to the other tiles.
TEST(CudaExpertsExact, WarpSpecialisedMatchesReference) {
  ORCHID_REQUIRE_GPU();
  if (!cuda::ws_tiles_supported()) GTEST_SKIP() << "no sm_90a device: no warp-specialised tiles";
  run_experts({DevFormat::q4, 300, 4, 2, 256, 128, 128, 64, true, 64});
  run_experts({DevFormat::q4, 100, 8, 3, 320, 192, 128, 64, true, 64});
  run_experts({DevFormat::q4, 1, 8, 3, 320, 192, 128, 64, true, 64});
  run_experts({DevFormat::q4, 150, 4, 3, 2048, 512, 128, 64, true, 64});
  run_experts({DevFormat::q4, 2000, 8, 3, 512, 256, 128, 64, true, 64});
  run_experts({DevFormat::q4, 300, 4, 2, 256, 128, 128, 32, true, 64});
}

// The scaled codes on the experts' 128-row warp-specialised tiles, exact and on x_hi alone: the
// cases of CudaExpertsExact.WarpSpecialisedMatchesReference (a down matrix in groups of 32 keeps
// its tiles with the sums given).
TEST(CudaExpertsScaled, MatchesReference) {
  ORCHID_REQUIRE_GPU();
  if (!cuda::ws_tiles_supported()) GTEST_SKIP() << "no sm_90a device: no warp-specialised tiles";
  for (bool exact : {true, false}) {
    run_experts({DevFormat::q4, 300, 4, 2, 256, 128, 128, 64, exact, 64, true});
    run_experts({DevFormat::q4, 100, 8, 3, 320, 192, 128, 64, exact, 64, true});
    run_experts({DevFormat::q4, 1, 8, 3, 320, 192, 128, 64, exact, 64, true});
    run_experts({DevFormat::q4, 150, 4, 3, 2048, 512, 128, 64, exact, 64, true});
    run_experts({DevFormat::q4, 2000, 8, 3, 512, 256, 128, 64, exact, 64, true});
    run_experts({DevFormat::q4, 300, 4, 2, 256, 128, 128, 32, exact, 64, true});
  }
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
  p.n_ff = 64;
  p.x_lo = x.get();  // a remainder in without one out
  EXPECT_FALSE(cuda::launch_expert_gate_up(p, nullptr).ok());
  DevBuf<uint16_t> act_lo(act.size());
  p.act_lo = act_lo.get();
  EXPECT_TRUE(cuda::launch_expert_gate_up(p, nullptr).ok());
  EXPECT_FALSE(cuda::launch_moe_combine(nullptr, 8, 3, 128, nullptr, nullptr).ok());
  ORCHID_CUDA_OK(cudaDeviceSynchronize());
}

// ---- Row-wise producers of the operands ---------------------------------------------------------

// A producer's hi (and lo) against its value v, computed here in double: with lo, hi + lo within
// `rel` · |v| + 2^-25 (the kernel's fp32 arithmetic, then the split's 2^-22) and |lo| at most half
// an fp16 step of hi; hi the same bits as without lo. Past fp16's ±65,504, hi saturates (lo 0).
void check_split(const char* what, const std::vector<double>& want, const std::vector<uint16_t>& hi,
                 const std::vector<uint16_t>& lo, const std::vector<uint16_t>& alone, double rel) {
  int bad = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double h = f16(hi[i]), l = f16(lo[i]), v = want[i];
    const bool ok = std::fabs(v) > 65504 ? h == std::copysign(65504.0, v) && l == 0
                                         : std::fabs(h + l - v) <= rel * std::fabs(v) + 0x1p-25 &&
                                               std::fabs(l) <= 0x1p-11 * std::fabs(h) + 0x1p-25;
    if (!(ok && hi[i] == alone[i]) && bad++ < 5)
      ADD_FAILURE() << what << " element " << i << ": hi " << h << " lo " << l << " (alone "
                    << f16(alone[i]) << ") vs " << v;
  }
}

// RMSNorm rows (block sums, rsqrt, two products in fp32: 2^-19) with rows of very different
// scales, and one weight large enough to push a normed value past fp16's range.
TEST(CudaPrefillRows, RmsNormWritesHiAndLo) {
  ORCHID_REQUIRE_GPU();
  std::mt19937_64 rng(std::random_device{}());
  const int rows = 6, n = 2048;
  auto x = test::random_floats(size_t(rows) * n, -1.f, 1.f, rng);
  auto w = test::random_floats(size_t(n), 0.5f, 1.5f, rng);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < n; ++c) x[size_t(r) * n + c] *= std::ldexp(1.f, 6 - 4 * r);
  x[7] = 1e5f, w[7] = 3000.f;  // dominates row 0: normed ≈ √n = 45, times 3000 > 65,504
  std::vector<double> want(x.size());
  for (int r = 0; r < rows; ++r) {
    double ss = 0;
    for (int c = 0; c < n; ++c) ss += double(x[size_t(r) * n + c]) * x[size_t(r) * n + c];
    const double inv = 1 / std::sqrt(ss / n + 1e-6);
    for (int c = 0; c < n; ++c) want[size_t(r) * n + c] = x[size_t(r) * n + c] * inv * w[size_t(c)];
  }
  ASSERT_GT(want[7], 65520.0);
  DevBuf<float> dx(x), dw(w);
  DevBuf<uint16_t> hi(x.size()), lo(x.size()), alone(x.size());
  ASSERT_TRUE(cuda::launch_rms_norm_rows_f16(dx.get(), dw.get(), 1e-6f, rows, n, alone.get(),
                                             nullptr, nullptr)
                  .ok());
  ASSERT_TRUE(cuda::launch_rms_norm_rows_f16(dx.get(), dw.get(), 1e-6f, rows, n, hi.get(), lo.get(),
                                             nullptr)
                  .ok());
  // With a dot row (the shared-expert gate, q8): x̂ · row in fp32, one value a row at stride 3,
  // within 1e-5 of Σ|x̂·w| (2,048 fp32 products and the norm).
  test::HostMatrix gate(cuda::DevFormat::q8, 1, n, rng);
  const test::DeviceMatrix dgate(gate);
  DevBuf<uint16_t> hi2(x.size());
  DevBuf<float> dots(std::vector<float>(size_t(rows) * 3, -7.f));
  ASSERT_TRUE(cuda::launch_rms_norm_rows_f16(dx.get(), dw.get(), 1e-6f, rows, n, hi2.get(), nullptr,
                                             nullptr, &dgate.m, dots.get(), 3)
                  .ok());
  ORCHID_CUDA_OK(cudaDeviceSynchronize());
  check_split("rms norm", want, hi.host(), lo.host(), alone.host(), 0x1p-19);
  EXPECT_EQ(hi2.host(), alone.host());
  const auto got = dots.host();
  for (int r = 0; r < rows; ++r) {
    double dot = 0, mag = 0;
    for (int c = 0; c < n; ++c) {
      const double t = want[size_t(r) * n + c] * gate.w[size_t(c)];
      dot += t, mag += std::fabs(t);
    }
    EXPECT_NEAR(got[size_t(r) * 3], dot, 1e-5 * mag + 1e-6) << "dot row " << r;
    EXPECT_EQ(got[size_t(r) * 3 + 1], -7.f) << "between the dots, row " << r;
  }
}

// silu(gate) · up in fp32 (expf, a division, a product: 2^-20), one product past fp16's range.
TEST(CudaPrefillRows, SiluMulWritesHiAndLo) {
  ORCHID_REQUIRE_GPU();
  std::mt19937_64 rng(std::random_device{}());
  const int T = 5, n = 520;
  auto g = test::random_floats(size_t(T) * n, -6.f, 6.f, rng);
  auto u = test::random_floats(size_t(T) * n, -3.f, 3.f, rng);
  g[11] = 400.f, u[11] = -300.f;
  std::vector<double> want(g.size());
  for (size_t i = 0; i < g.size(); ++i) want[i] = silu(g[i]) * u[i];
  DevBuf<float> dg(g), du(u);
  DevBuf<uint16_t> hi(g.size()), lo(g.size()), alone(g.size());
  ASSERT_TRUE(
      cuda::launch_silu_mul_rows_f16(dg.get(), du.get(), T, n, alone.get(), nullptr, nullptr).ok());
  ASSERT_TRUE(
      cuda::launch_silu_mul_rows_f16(dg.get(), du.get(), T, n, hi.get(), lo.get(), nullptr).ok());
  ORCHID_CUDA_OK(cudaDeviceSynchronize());
  check_split("silu·mul", want, hi.host(), lo.host(), alone.host(), 0x1p-20);
}

}  // namespace
}  // namespace orchid

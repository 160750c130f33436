// The prefill attention kernels against a double-precision reference on fresh random inputs,
// real and odd shapes: the q/k norm + RoPE + K/V write (also bit for bit against the decode
// kernel), flash attention on tensor cores (mma.sync, and wgmma on Hopper wherever it applies)
// and the naive ablation, one chunk against two.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <thread>

#include "../cuda_test_util.h"
#include "orchid/backend/cuda/prefill/prefill_kernels.h"

namespace orchid {
namespace {

using test::DevBuf;

struct Shape {
  int nh, nkv, hd, n_rot;
};
constexpr Shape kReal{16, 2, 256, 64};

constexpr int kSpareRows = 16;  // cache rows past the chunk, left NaN
constexpr uint16_t kNaN16 = 0xffff;

// The flash kernels: mma.sync (every head dim, sm_80 on) and wgmma (Hopper, hd 64 / 128 / 256).
// Both round q and P to bf16, so they share the reference's bounds.
enum class Flash { mma, wgmma };
const char* flash_name(Flash f) {
  return f == Flash::mma ? "flash (mma.sync)" : "flash (wgmma)";
}
// A kernel that never finishes (a barrier protocol that deadlocks) would hold the GPU until the
// machine's limit: past 30 s, far beyond any case here (milliseconds), the test binary exits with
// a message instead.
void finish_or_exit(const char* what) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (cudaStreamQuery(nullptr) == cudaErrorNotReady) {
    if (std::chrono::steady_clock::now() > deadline) {
      std::fprintf(stderr, "%s did not finish in 30 s: hung; exiting\n", what);
      std::fflush(stderr);
      std::_Exit(3);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}
Status launch_flash(Flash f, const cuda::AttnPrefillParams& p) {
  if (f == Flash::mma) return cuda::launch_attention_prefill(p, nullptr);
  const Status st = cuda::launch_attention_prefill_wgmma(p, nullptr);
  if (st.ok()) finish_or_exit(flash_name(f));
  return st;
}
// The flash kernels that apply to head dim hd on this device.
std::vector<Flash> flash_kernels(int hd) {
  std::vector<Flash> f{Flash::mma};
  if (cuda::attention_prefill_wgmma_supported(hd)) f.push_back(Flash::wgmma);
  return f;
}

// A chunk of T tokens at position pos0 of one layer: the projections' outputs and the cache, whose
// rows before pos0 hold random bf16 K/V (an earlier chunk's) and every later row NaN, so that a
// row the norm launch skips, or a key the attention reads past pos0 + T, shows.
struct Chunk {
  Shape sh;
  int pos0, T;
  std::vector<float> qg;              // [T, nh, 2 · hd]: query | gate
  std::vector<float> k, v;            // [T, nkv · hd]
  std::vector<float> q_norm, k_norm;  // [hd]
  std::vector<float> inv_freq;        // [n_rot / 2]
  std::vector<uint16_t> kc, vc;       // [pos0 + T + kSpareRows, nkv, hd] bf16
  std::string name() const {
    return std::to_string(sh.nh) + "/" + std::to_string(sh.nkv) + " heads, hd " +
           std::to_string(sh.hd) + ", n_rot " + std::to_string(sh.n_rot) + ", T " +
           std::to_string(T) + ", pos0 " + std::to_string(pos0);
  }
};

Chunk make_chunk(Shape sh, int pos0, int T, std::mt19937_64& rng) {
  Chunk c{sh, pos0, T, {}, {}, {}, {}, {}, {}, {}, {}};
  c.qg = test::random_floats(size_t(T) * sh.nh * 2 * sh.hd, -3.f, 3.f, rng);
  c.k = test::random_floats(size_t(T) * sh.nkv * sh.hd, -2.f, 2.f, rng);
  c.v = test::random_floats(size_t(T) * sh.nkv * sh.hd, -1.f, 1.f, rng);
  // q weights up to 2.5: scores of a few units, so softmax rows are peaked, not flat.
  c.q_norm = test::random_floats(size_t(sh.hd), 0.5f, 2.5f, rng);
  c.k_norm = test::random_floats(size_t(sh.hd), 0.5f, 1.5f, rng);
  for (int i = 0; i < sh.n_rot / 2; ++i)
    c.inv_freq.push_back(float(1.0 / std::pow(1e7, double(2 * i) / sh.n_rot)));
  const size_t row = size_t(sh.nkv) * sh.hd;
  c.kc.assign(size_t(pos0 + T + kSpareRows) * row, kNaN16);
  c.vc.assign(c.kc.size(), kNaN16);
  std::uniform_real_distribution<float> uk(-2.f, 2.f), uv(-1.f, 1.f);
  for (size_t i = 0; i < size_t(pos0) * row; ++i)
    c.kc[i] = f32_to_bf16(uk(rng)), c.vc[i] = f32_to_bf16(uv(rng));
  return c;
}

// The chunk on the device; the fp16 output starts poisoned (NaN).
struct DevChunk {
  DevBuf<float> qg, k, v, q_norm, k_norm, inv_freq;
  DevBuf<uint16_t> kc, vc, out;
  cuda::AttnPrefillParams p;
  explicit DevChunk(const Chunk& c)
      : qg(c.qg),
        k(c.k),
        v(c.v),
        q_norm(c.q_norm),
        k_norm(c.k_norm),
        inv_freq(c.inv_freq),
        kc(c.kc),
        vc(c.vc),
        out(size_t(c.T) * c.sh.nh * c.sh.hd) {
    p.qg = qg.get(), p.k = k.get(), p.v = v.get(), p.q_norm = q_norm.get();
    p.k_norm = k_norm.get(), p.inv_freq = inv_freq.get();
    p.n_head = c.sh.nh, p.n_head_kv = c.sh.nkv, p.hd = c.sh.hd, p.n_rot = c.sh.n_rot;
    p.kc = kc.get(), p.vc = vc.get(), p.pos0 = c.pos0, p.T = c.T, p.out = out.get();
  }
};

// RMSNorm (weight w, eps 1e-6), then rotate-half RoPE at `pos` on the first n_rot dims, in
// double; the angle is formed as the kernels form it (fp32 inv_freq · fp32 pos).
std::vector<double> norm_rope(const Chunk& c, const float* x, const std::vector<float>& w,
                              int pos) {
  const int hd = c.sh.hd, half = c.sh.n_rot / 2;
  double ss = 0;
  for (int d = 0; d < hd; ++d) ss += double(x[d]) * x[d];
  const double inv = 1 / std::sqrt(ss / hd + 1e-6);
  std::vector<double> n(size_t(hd), 0.0), y;
  for (int d = 0; d < hd; ++d) n[size_t(d)] = x[d] * inv * w[size_t(d)];
  y = n;
  for (int i = 0; i < half; ++i) {
    const double a = double(c.inv_freq[size_t(i)] * float(pos));
    y[size_t(i)] = n[size_t(i)] * std::cos(a) - n[size_t(i + half)] * std::sin(a);
    y[size_t(i + half)] = n[size_t(i + half)] * std::cos(a) + n[size_t(i)] * std::sin(a);
  }
  return y;
}

// After the norm launch. q (in qg): within 1e-5 · (1 + |q|) of the reference — fp32 rounding of
// the sum of squares, rsqrt and sincos is ~1e-6 of the head's scale (the values are O(1)); the
// gate untouched. The chunk's K rows within one bf16 step (|K| / 128) of the reference's bf16
// (the fp32 value may round to the other side) plus the same 1e-5 of the head's scale (a K
// element near 0 after the rotation, e.g. 5.4e-6, carries that absolute error, many bf16 steps
// of its own size), V rows bit for bit; every other row unchanged.
void check_norm(const Chunk& c, const DevChunk& d) {
  const int hd = c.sh.hd, nh = c.sh.nh, nkv = c.sh.nkv;
  const auto qg = d.qg.host();
  int bad = 0;
  for (int t = 0; t < c.T; ++t)
    for (int h = 0; h < nh; ++h) {
      const size_t base = (size_t(t) * nh + h) * 2 * hd;
      const auto want = norm_rope(c, c.qg.data() + base, c.q_norm, c.pos0 + t);
      for (int i = 0; i < hd; ++i) {
        const double w = want[size_t(i)], got = qg[base + size_t(i)];
        if (!(std::fabs(got - w) <= 1e-5 * (1 + std::fabs(w))) && bad++ < 5)
          ADD_FAILURE() << c.name() << ": q token " << t << " head " << h << " dim " << i << ": "
                        << got << " vs " << w;
        if (qg[base + size_t(hd + i)] != c.qg[base + size_t(hd + i)] && bad++ < 5)
          ADD_FAILURE() << c.name() << ": gate changed, token " << t << " head " << h;
      }
    }
  const auto kc = d.kc.host(), vc = d.vc.host();
  for (size_t r = 0; r < kc.size() / (size_t(nkv) * hd); ++r)
    for (int g = 0; g < nkv; ++g) {
      const int t = int(r) - c.pos0;
      const bool chunk_row = t >= 0 && t < c.T;
      const size_t base = (r * nkv + size_t(g)) * hd;
      std::vector<double> kr;
      if (chunk_row)
        kr = norm_rope(c, c.k.data() + (size_t(t) * nkv + g) * hd, c.k_norm, c.pos0 + t);
      for (int dim = 0; dim < hd; ++dim) {
        const size_t i = base + size_t(dim);
        uint16_t want_k = c.kc[i], want_v = c.vc[i];
        if (chunk_row) {
          want_k = f32_to_bf16(float(kr[size_t(dim)]));
          want_v = f32_to_bf16(c.v[(size_t(t) * nkv + g) * hd + size_t(dim)]);
          const float wk = bf16_to_f32(want_k), gk = bf16_to_f32(kc[i]);
          if (!(std::fabs(gk - wk) <= std::fabs(wk) / 128 + 1e-5) && bad++ < 5)
            ADD_FAILURE() << c.name() << ": K row " << r << " head " << g << " dim " << dim << ": "
                          << gk << " vs " << wk;
        } else if (kc[i] != want_k && bad++ < 5) {
          ADD_FAILURE() << c.name() << ": K row " << r << " (outside the chunk) changed";
        }
        if (vc[i] != want_v && bad++ < 5)
          ADD_FAILURE() << c.name() << ": V row " << r << " head " << g << " dim " << dim;
      }
    }
}

// The reference attention of a chunk over the device's cache (K as the norm launch stored it),
// with the pieces of the error bound. Per row (token t, head h) with q the double q of
// norm_rope, s_j = q · K_j / √hd over keys j ≤ pos0 + t, p̂ = softmax(s), o = Σ p̂_j V_j and
// σ = sigmoid(gate):
//   want = σ · o;  a = σ · Σ p̂_j |V_j − o|;  b = σ · Σ p̂_j |V_j|  (per dim)
//   s_abs = max_j Σ_d |q_d K_jd| / √hd  (per row).
struct Reference {
  std::vector<double> want, a, b;  // [T, nh, hd]
  std::vector<double> s_abs;       // [T, nh]
};

Reference reference(const Chunk& c, const std::vector<uint16_t>& kc_bits,
                    const std::vector<uint16_t>& vc_bits) {
  const int hd = c.sh.hd, nh = c.sh.nh, nkv = c.sh.nkv, G = nh / nkv;
  std::vector<double> kc(kc_bits.size()), vc(vc_bits.size());
  for (size_t i = 0; i < kc.size(); ++i) kc[i] = bf16_to_f32(kc_bits[i]);
  for (size_t i = 0; i < vc.size(); ++i) vc[i] = bf16_to_f32(vc_bits[i]);
  Reference r;
  const size_t n = size_t(c.T) * nh * hd;
  r.want.resize(n), r.a.resize(n), r.b.resize(n), r.s_abs.resize(size_t(c.T) * nh);
  const double scale = 1 / std::sqrt(double(hd));
  // Rows (token t, head h) are independent: tokens are spread over the host's threads (the
  // long-context cases score 8,000 keys a row).
  auto rows = [&](int t0, int t_step) {
    std::vector<double> s, o(static_cast<size_t>(hd)), a(o), b(o);
    for (int t = t0; t < c.T; t += t_step)
      for (int h = 0; h < nh; ++h) {
        const size_t qrow = size_t(t) * nh + h;
        const auto q = norm_rope(c, c.qg.data() + qrow * 2 * hd, c.q_norm, c.pos0 + t);
        const int n_keys = c.pos0 + t + 1, g = h / G;
        s.assign(size_t(n_keys), 0.0);
        double mx = -1e300, s_abs = 0;
        for (int j = 0; j < n_keys; ++j) {
          const double* kr = kc.data() + (size_t(j) * nkv + g) * hd;
          double dot = 0, abs_dot = 0;
          for (int d = 0; d < hd; ++d)
            dot += q[size_t(d)] * kr[d], abs_dot += std::fabs(q[size_t(d)] * kr[d]);
          s[size_t(j)] = dot * scale;
          mx = std::max(mx, s[size_t(j)]);
          s_abs = std::max(s_abs, abs_dot * scale);
        }
        r.s_abs[qrow] = s_abs;
        double l = 0;
        for (auto& x : s) l += x = std::exp(x - mx);
        for (auto& x : s) x /= l;
        std::fill(o.begin(), o.end(), 0.0);
        std::fill(a.begin(), a.end(), 0.0);
        std::fill(b.begin(), b.end(), 0.0);
        for (int j = 0; j < n_keys; ++j) {
          const double* vr = vc.data() + (size_t(j) * nkv + g) * hd;
          for (int d = 0; d < hd; ++d) o[size_t(d)] += s[size_t(j)] * vr[d];
        }
        for (int j = 0; j < n_keys; ++j) {
          const double* vr = vc.data() + (size_t(j) * nkv + g) * hd;
          for (int d = 0; d < hd; ++d) {
            a[size_t(d)] += s[size_t(j)] * std::fabs(vr[d] - o[size_t(d)]);
            b[size_t(d)] += s[size_t(j)] * std::fabs(vr[d]);
          }
        }
        for (int d = 0; d < hd; ++d) {
          const double sg = 1 / (1 + std::exp(-double(c.qg[qrow * 2 * hd + size_t(hd + d)])));
          const size_t i = qrow * hd + size_t(d);
          r.want[i] = sg * o[size_t(d)], r.a[i] = sg * a[size_t(d)], r.b[i] = sg * b[size_t(d)];
        }
      }
  };
  const int n_threads = int(std::clamp(std::thread::hardware_concurrency(), 1u, 32u));
  std::vector<std::thread> pool;
  for (int i = 0; i < n_threads; ++i) pool.emplace_back(rows, i, n_threads);
  for (std::thread& th : pool) th.join();
  return r;
}

// The output's error bound, first order in the rounding units, worst case per element:
//  - q rounded to bf16 (unit u_q: 2⁻⁸ in the flash kernel, 0 in the naive one) moves score j by
//    at most δ = u_q · s_abs; the softmax then moves o_d by Σ p̂_j (δs_j − Σ p̂ δs)(V_jd − o_d),
//    at most 2δ · a_d / σ;
//  - P rounded to bf16 for P·V (unit u_p) while l sums the fp32 P: at most u_p · b_d / σ;
//  - fp32 arithmetic: score dots of hd products (hd · 2⁻²⁴ relative, added to u_q) and sums of
//    n_keys terms ((n_keys + hd) · 2⁻²⁴ relative, added to u_p);
//  - the fp16 output: 2⁻¹¹ relative, and 1e-6 absolute for tiny values; with its remainder (lo,
//    the exact path) added back, 2⁻²⁰ (hi + lo within 2⁻²² of the fp32 value, whose gate product
//    and sigmoid add a few fp32 roundings).
// The first two are scaled by 1.25 for the second-order terms (δ ≤ 0.2 here: exp(δ) − 1 − δ ≤
// 0.13 δ). Typical errors are 3-10× smaller. The per-row relative L2 error is checked against
// `rel_l2`: random roundings add ~u/√3 of the row each — the fp16 output 2.8e-4 (the naive
// kernel's level; bound 1e-3), P 2.3e-3 and q 2.3e-3 times the scores' rounding gain
// ‖q ⊙ K_j‖ / √hd ≈ 2 here, ~5e-3 in all (the flash kernel; observed up to 8e-3 on peaked rows,
// bound 1.6e-2). `lo` (may be null): the remainder, added to out.
void check_out(const char* what, const Chunk& c, const Reference& ref,
               const std::vector<uint16_t>& out, const std::vector<uint16_t>* lo, double u_q,
               double u_p, double rel_l2) {
  const int hd = c.sh.hd, nh = c.sh.nh;
  int bad = 0;
  double worst_ratio = 0, worst_l2 = 0;
  for (int t = 0; t < c.T; ++t)
    for (int h = 0; h < nh; ++h) {
      const size_t row = size_t(t) * nh + h;
      const double n_keys = c.pos0 + t + 1, f32 = std::ldexp(1.0, -24);
      const double delta = (u_q + hd * f32) * ref.s_abs[row], up = u_p + (n_keys + hd) * f32;
      double e2 = 0, w2 = 0;
      for (int d = 0; d < hd; ++d) {
        const size_t i = row * hd + size_t(d);
        const double got = f16_to_f32(out[i]) + (lo ? f16_to_f32((*lo)[i]) : 0.f);
        const double want = ref.want[i];
        const double bound = 1.25 * (2 * delta * ref.a[i] + up * ref.b[i]) +
                             std::ldexp(std::fabs(want), lo ? -20 : -11) + 1e-6;
        const double e = std::fabs(got - want);
        e2 += e * e, w2 += want * want;
        worst_ratio = std::max(worst_ratio, e / bound);
        if (!(e <= bound) && bad++ < 5)  // NaN fails too
          ADD_FAILURE() << what << ", " << c.name() << ": token " << t << " head " << h << " dim "
                        << d << ": " << got << " vs " << want << " (bound " << bound << ")";
      }
      const double l2 = std::sqrt(e2 / std::max(w2, 1e-30));
      worst_l2 = std::max(worst_l2, l2);
      if (!(l2 <= rel_l2) && bad++ < 5)
        ADD_FAILURE() << what << ", " << c.name() << ": token " << t << " head " << h
                      << ": relative L2 error " << l2 << " (bound " << rel_l2 << ")";
    }
  std::printf("  %s, %s: worst error / bound %.3f, worst row relative L2 %.2e\n", what,
              c.name().c_str(), worst_ratio, worst_l2);
}

constexpr double kBf16Unit = 1.0 / 256;  // 2⁻⁸: bf16 (8 significant bits) round-to-nearest

struct Case {
  Shape sh;
  int T, pos0;
};

// Norm launch, then each flash kernel and the naive attention (each on a freshly poisoned output)
// against the reference. Cases: T of 1, a tile's 64 ± 1 and several tiles, from position 0 and
// after an earlier chunk; the real shape (also 1,000-token chunks: 63 row blocks of the wgmma
// kernel per KV head, up to 16 K/V tiles through its stages; and a long context, 130 tokens after
// 8,000 earlier keys: 128 tiles, the stages' barriers through 64 phases), a group of 3 at hd 128,
// no grouping at hd 64, a group of 8 on one KV head, a group of 6 at hd 256, the golden fixtures'
// hd 32 and 48 (mma.sync only). The flash kernels round q and P to bf16: the same bounds. The
// wgmma kernel's pingpong schedule meets every case's tile count: one tile (its consumers' turn
// barriers through 2 rounds), 2, 4, 16 and 128.
TEST(CudaAttentionPrefill, MatchesReference) {
  ORCHID_REQUIRE_GPU();
  std::mt19937_64 rng(std::random_device{}());
  const Shape odd3{6, 2, 128, 32}, mha{4, 4, 64, 64}, g8{8, 1, 128, 64}, g6{12, 2, 256, 64};
  const Shape tiny{8, 1, 32, 8}, odd{6, 2, 48, 24};  // the golden fixtures' attention
  const Case cases[] = {{kReal, 1, 0},      {kReal, 63, 0},   {kReal, 64, 0},    {kReal, 65, 0},
                        {kReal, 200, 0},    {kReal, 1000, 0}, {kReal, 1, 517},   {kReal, 63, 100},
                        {kReal, 64, 129},   {kReal, 65, 300}, {kReal, 200, 333}, {kReal, 1000, 77},
                        {kReal, 130, 8000}, {odd3, 1, 0},     {odd3, 64, 0},     {odd3, 65, 129},
                        {odd3, 200, 0},     {odd3, 200, 71},  {mha, 63, 0},      {mha, 63, 17},
                        {mha, 65, 31},      {mha, 200, 0},    {mha, 200, 1000},  {g8, 65, 0},
                        {g8, 200, 50},      {g6, 65, 40},     {g6, 200, 0},      {tiny, 65, 0},
                        {tiny, 100, 37},    {odd, 65, 0},     {odd, 100, 37}};
  for (const Case& cs : cases) {
    const Chunk c = make_chunk(cs.sh, cs.pos0, cs.T, rng);
    DevChunk d(c);
    ASSERT_TRUE(cuda::launch_qk_norm_rope_kv_prefill(d.p, nullptr).ok());
    ORCHID_CUDA_OK(cudaDeviceSynchronize());
    check_norm(c, d);
    const Reference ref = reference(c, d.kc.host(), d.vc.host());

    for (Flash f : flash_kernels(cs.sh.hd)) {
      ORCHID_CUDA_OK(cudaMemset(d.out.get(), 0xff, d.out.bytes()));
      const Status st = launch_flash(f, d.p);
      ASSERT_TRUE(st.ok()) << flash_name(f) << ": " << st.message();
      ORCHID_CUDA_OK(cudaDeviceSynchronize());
      check_out(flash_name(f), c, ref, d.out.host(), nullptr, kBf16Unit, kBf16Unit, 1.6e-2);
    }

    DevBuf<float> scores(size_t(cs.sh.nh) * cs.T * (cs.pos0 + cs.T));
    ORCHID_CUDA_OK(cudaMemset(d.out.get(), 0xff, d.out.bytes()));
    const Status sn = cuda::launch_attention_prefill_naive(d.p, scores.get(), nullptr);
    ASSERT_TRUE(sn.ok()) << sn.message();
    ORCHID_CUDA_OK(cudaDeviceSynchronize());
    check_out("naive", c, ref, d.out.host(), nullptr, 0, 0, 1e-3);
  }
}

// The wgmma kernel is what runs on a Hopper device (compute capability 9.0) for head dims 64, 128
// and 256 — so that the tests above exercise it there — and never for other head dims.
TEST(CudaAttentionPrefill, WgmmaKernelWhereItApplies) {
  ORCHID_REQUIRE_GPU();
  int dev = 0;
  cudaDeviceProp prop{};
  ORCHID_CUDA_OK(cudaGetDevice(&dev));
  ORCHID_CUDA_OK(cudaGetDeviceProperties(&prop, dev));
  const bool hopper = prop.major == 9 && prop.minor == 0;
  for (int hd : {64, 128, 256})
    EXPECT_EQ(cuda::attention_prefill_wgmma_supported(hd), hopper) << "hd " << hd;
  for (int hd : {32, 48, 96, 192}) EXPECT_FALSE(cuda::attention_prefill_wgmma_supported(hd));
}

// With out_lo set, every kernel keeps the fp16 output's bits and writes what its rounding dropped
// (|lo| ≤ half an fp16 step of hi: 2⁻¹¹ |hi|, 2⁻²⁵ below the normal range); the naive kernel, fp32
// throughout, then meets the reference at fp32's level (rel. L2 1e-5 per row; the fp16 output
// alone is at 2.8e-4).
TEST(CudaAttentionPrefill, WritesTheExactRemainder) {
  ORCHID_REQUIRE_GPU();
  std::mt19937_64 rng(std::random_device{}());
  const Case cases[] = {{kReal, 65, 300}, {{6, 2, 128, 32}, 200, 71}, {{8, 1, 32, 8}, 100, 37}};
  for (const Case& cs : cases) {
    const Chunk c = make_chunk(cs.sh, cs.pos0, cs.T, rng);
    DevChunk d(c);
    ASSERT_TRUE(cuda::launch_qk_norm_rope_kv_prefill(d.p, nullptr).ok());
    ORCHID_CUDA_OK(cudaDeviceSynchronize());
    const Reference ref = reference(c, d.kc.host(), d.vc.host());
    DevBuf<uint16_t> lo(d.out.size());
    DevBuf<float> scores(size_t(cs.sh.nh) * cs.T * (cs.pos0 + cs.T));
    std::vector<std::optional<Flash>> kernels;  // the flash kernels, then (nullopt) the naive one
    for (Flash f : flash_kernels(cs.sh.hd)) kernels.push_back(f);
    kernels.push_back(std::nullopt);
    for (const std::optional<Flash>& k : kernels) {
      const std::string what = c.name() + ": " + (k ? flash_name(*k) : "naive");
      auto run = [&](uint16_t* out_lo) {
        cuda::AttnPrefillParams p = d.p;
        p.out_lo = out_lo;
        ORCHID_CUDA_OK(cudaMemset(d.out.get(), 0xff, d.out.bytes()));
        const Status st = k ? launch_flash(*k, p)
                            : cuda::launch_attention_prefill_naive(p, scores.get(), nullptr);
        ASSERT_TRUE(st.ok()) << what << ": " << st.message();
        ORCHID_CUDA_OK(cudaDeviceSynchronize());
      };
      run(nullptr);
      const auto alone = d.out.host();
      run(lo.get());
      const auto hi = d.out.host(), rem = lo.host();
      EXPECT_TRUE(hi == alone) << what << ": out's bits";
      int bad = 0;
      for (size_t i = 0; i < hi.size(); ++i) {
        const double h = f16_to_f32(hi[i]), l = f16_to_f32(rem[i]);
        if (!(std::fabs(l) <= std::ldexp(std::fabs(h), -11) + std::ldexp(1.0, -25)) && bad++ < 5)
          ADD_FAILURE() << what << ": element " << i << " hi " << h << " lo " << l;
      }
      if (!k) check_out("naive, hi + lo", c, ref, hi, &rem, 0, 0, 1e-5);
    }
  }
}

// The prefill norm launch writes what the decode launch (one token at a time) writes, bit for bit:
// the normed q and the cache rows, so decode continues a prefilled cache exactly.
TEST(CudaAttentionPrefill, NormMatchesDecodeKernelBits) {
  ORCHID_REQUIRE_GPU();
  std::mt19937_64 rng(std::random_device{}());
  for (Case cs : {Case{kReal, 20, 5}, Case{{6, 2, 128, 32}, 9, 0}}) {
    const Chunk c = make_chunk(cs.sh, cs.pos0, cs.T, rng);
    DevChunk pre(c), dec(c);
    ASSERT_TRUE(cuda::launch_qk_norm_rope_kv_prefill(pre.p, nullptr).ok());
    const int hd = cs.sh.hd;
    DevBuf<int> pos(size_t(1));
    for (int t = 0; t < cs.T; ++t) {
      const int p = cs.pos0 + t;
      ORCHID_CUDA_OK(cudaMemcpy(pos.get(), &p, sizeof p, cudaMemcpyHostToDevice));
      cuda::AttnParams a;
      a.qg = dec.qg.get() + size_t(t) * cs.sh.nh * 2 * hd;
      a.k = dec.k.get() + size_t(t) * cs.sh.nkv * hd;
      a.v = dec.v.get() + size_t(t) * cs.sh.nkv * hd;
      a.q_norm = dec.q_norm.get(), a.k_norm = dec.k_norm.get(), a.inv_freq = dec.inv_freq.get();
      a.n_head = cs.sh.nh, a.n_head_kv = cs.sh.nkv, a.hd = hd, a.n_rot = cs.sh.n_rot;
      a.kc = dec.kc.get(), a.vc = dec.vc.get(), a.pos = pos.get();
      ASSERT_TRUE(cuda::launch_qk_norm_rope_kv(a, nullptr).ok());
      ORCHID_CUDA_OK(cudaDeviceSynchronize());
    }
    EXPECT_EQ(pre.qg.host(), dec.qg.host()) << c.name() << ": q";
    EXPECT_EQ(pre.kc.host(), dec.kc.host()) << c.name() << ": K cache";
    EXPECT_EQ(pre.vc.host(), dec.vc.host()) << c.name() << ": V cache";
  }
}

// A prompt prefilled as one chunk or as two (T1 tokens, then T − T1 at pos0 = T1 over the first
// chunk's cache rows) gives the same bits, with each flash kernel: the norm is per token, and a
// query row's flash result depends only on its own keys, visited in the same 0-aligned tiles
// (tiles past a row's last key leave it exactly unchanged: P = 0, correction 1), whichever row
// block, warp or warpgroup the row falls in.
TEST(CudaAttentionPrefill, TwoChunksEqualOne) {
  ORCHID_REQUIRE_GPU();
  std::mt19937_64 rng(std::random_device{}());
  struct Split {
    Shape sh;
    int T, T1;
  };
  for (Split sp : {Split{kReal, 200, 77}, Split{kReal, 130, 64}, Split{kReal, 300, 150},
                   Split{{6, 2, 128, 32}, 150, 1}, Split{{4, 4, 64, 64}, 129, 100}}) {
    const Chunk c = make_chunk(sp.sh, 0, sp.T, rng);
    for (Flash f : flash_kernels(sp.sh.hd)) {
      DevChunk one(c), two(c);
      ASSERT_TRUE(cuda::launch_qk_norm_rope_kv_prefill(one.p, nullptr).ok());
      ASSERT_TRUE(launch_flash(f, one.p).ok());
      const int hd = sp.sh.hd;
      cuda::AttnPrefillParams first = two.p, second = two.p;
      first.T = sp.T1;
      second.pos0 = sp.T1, second.T = sp.T - sp.T1;
      second.qg += size_t(sp.T1) * sp.sh.nh * 2 * hd;
      second.k += size_t(sp.T1) * sp.sh.nkv * hd;
      second.v += size_t(sp.T1) * sp.sh.nkv * hd;
      second.out += size_t(sp.T1) * sp.sh.nh * hd;
      for (const cuda::AttnPrefillParams& p : {first, second}) {
        ASSERT_TRUE(cuda::launch_qk_norm_rope_kv_prefill(p, nullptr).ok());
        ASSERT_TRUE(launch_flash(f, p).ok());
      }
      ORCHID_CUDA_OK(cudaDeviceSynchronize());
      const std::string what =
          c.name() + ", split at " + std::to_string(sp.T1) + ", " + flash_name(f);
      EXPECT_EQ(one.qg.host(), two.qg.host()) << what << ": q";
      EXPECT_EQ(one.kc.host(), two.kc.host()) << what << ": K cache";
      EXPECT_EQ(one.vc.host(), two.vc.host()) << what << ": V cache";
      const auto o1 = one.out.host(), o2 = two.out.host();
      EXPECT_EQ(o1, o2) << what << ": output";
      EXPECT_TRUE(
          std::none_of(o1.begin(), o1.end(), [](uint16_t h) { return std::isnan(f16_to_f32(h)); }))
          << what << ": NaN in the output";
    }
  }
}

// The wgmma kernel writes the same bits, output and remainder, run after run: a missing fence, an
// operand read before its product landed or a turn barrier that lets the consumers race would
// show as a difference between runs. Tile counts 1 to 128, every head dim.
TEST(CudaAttentionPrefill, WgmmaKernelGivesTheSameBitsRunToRun) {
  ORCHID_REQUIRE_GPU();
  if (!cuda::attention_prefill_wgmma_supported(256)) GTEST_SKIP() << "no sm_90a device";
  std::mt19937_64 rng(std::random_device{}());
  const Case cases[] = {{kReal, 1, 0},
                        {kReal, 64, 0},
                        {kReal, 65, 300},
                        {kReal, 1000, 0},
                        {kReal, 130, 8000},
                        {{6, 2, 128, 32}, 200, 71},
                        {{8, 1, 128, 64}, 65, 0},
                        {{4, 4, 64, 64}, 200, 1000}};
  for (const Case& cs : cases) {
    const Chunk c = make_chunk(cs.sh, cs.pos0, cs.T, rng);
    DevChunk d(c);
    ASSERT_TRUE(cuda::launch_qk_norm_rope_kv_prefill(d.p, nullptr).ok());
    DevBuf<uint16_t> lo(d.out.size());
    cuda::AttnPrefillParams p = d.p;
    p.out_lo = lo.get();
    std::vector<uint16_t> out[3], rem[3];
    for (int i = 0; i < 3; ++i) {
      ORCHID_CUDA_OK(cudaMemset(d.out.get(), 0xff, d.out.bytes()));
      ORCHID_CUDA_OK(cudaMemset(lo.get(), 0xff, lo.bytes()));
      const Status st = launch_flash(Flash::wgmma, p);
      ASSERT_TRUE(st.ok()) << flash_name(Flash::wgmma) << ": " << st.message();
      ORCHID_CUDA_OK(cudaDeviceSynchronize());
      out[i] = d.out.host(), rem[i] = lo.host();
    }
    for (int i = 1; i < 3; ++i)
      EXPECT_TRUE(out[i] == out[0] && rem[i] == rem[0]) << c.name() << ": run " << i << " vs 0";
    EXPECT_TRUE(std::none_of(out[0].begin(), out[0].end(),
                             [](uint16_t h) { return std::isnan(f16_to_f32(h)); }))
        << c.name() << ": NaN in the output";
  }
}

// Unsupported shapes fail at the launch with a message, and launch nothing.
TEST(CudaAttentionPrefill, RejectsUnsupportedShapes) {
  ORCHID_REQUIRE_GPU();
  std::mt19937_64 rng(std::random_device{}());
  const Chunk c = make_chunk(kReal, 0, 4, rng);
  DevChunk d(c);
  DevBuf<float> scores(size_t(16) * 4 * 4);
  auto rejected = [&](cuda::AttnPrefillParams p) {
    return !cuda::launch_attention_prefill(p, nullptr).ok() &&
           !cuda::launch_attention_prefill_wgmma(p, nullptr).ok() &&
           !cuda::launch_attention_prefill_naive(p, scores.get(), nullptr).ok() &&
           !cuda::launch_qk_norm_rope_kv_prefill(p, nullptr).ok();
  };
  cuda::AttnPrefillParams p = d.p;
  p.T = 0;
  EXPECT_TRUE(rejected(p)) << "T 0";
  p = d.p, p.n_head_kv = 3;
  EXPECT_TRUE(rejected(p)) << "16 heads over 3";
  p = d.p, p.n_head = 32, p.n_head_kv = 2;
  EXPECT_TRUE(rejected(p)) << "group of 16";
  p = d.p, p.hd = 96;
  EXPECT_FALSE(cuda::launch_attention_prefill(p, nullptr).ok()) << "flash at hd 96";
  EXPECT_FALSE(cuda::launch_attention_prefill_wgmma(p, nullptr).ok()) << "wgmma at hd 96";
  p = d.p, p.hd = 32;
  EXPECT_FALSE(cuda::launch_attention_prefill_wgmma(p, nullptr).ok()) << "wgmma at hd 32";
  p = d.p, p.out = nullptr;
  EXPECT_FALSE(cuda::launch_attention_prefill(p, nullptr).ok()) << "no output";
  EXPECT_FALSE(cuda::launch_attention_prefill_wgmma(p, nullptr).ok()) << "wgmma, no output";
  EXPECT_FALSE(cuda::launch_attention_prefill_naive(d.p, nullptr, nullptr).ok()) << "no scores";
  ORCHID_CUDA_OK(cudaDeviceSynchronize());
}

}  // namespace
}  // namespace orchid

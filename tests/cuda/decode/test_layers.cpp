// The MoE expert kernels, decode attention and the Gated DeltaNet step against double-precision
// references on fresh random inputs (real and odd shapes). Bounds are stated per test.
#include <cmath>

#include "../cuda_test_util.h"
#include "orchid/backend/cuda/common/kernels.h"

namespace orchid {
namespace {

using test::DevBuf;

double silu(double x) {
  return x / (1 + std::exp(-x));
}
double sigm(double x) {
  return 1 / (1 + std::exp(-x));
}
float bf16r(float x) {
  return round_bf16(x);
}

// ---- Standalone RMSNorm (the unfused ablation path): bound 1e-5 relative per element. ----
TEST(CudaRmsNorm, MatchesReference) {
  ORCHID_REQUIRE_GPU();
  std::mt19937_64 rng(std::random_device{}());
  for (int n : {2048, 96, 4099}) {
    auto x = test::random_floats(size_t(n), -30.f, 30.f, rng);
    auto w = test::random_floats(size_t(n), 0.5f, 1.5f, rng);
    DevBuf<float> dx(x), dw(w), out(static_cast<size_t>(n));
    ASSERT_TRUE(
        cuda::launch_rms_norm(dx.get(), dw.get(), 1e-6f, n, out.get(), nullptr, nullptr).ok());
    ORCHID_CUDA_OK(cudaDeviceSynchronize());
    double ss = 0;
    for (float v : x) ss += double(v) * v;
    const double inv = 1 / std::sqrt(ss / n + 1e-6);
    auto got = out.host();
    for (int i = 0; i < n; ++i) {
      const double want = x[size_t(i)] * inv * w[size_t(i)];
      ASSERT_NEAR(got[size_t(i)], want, 1e-5 * std::fabs(want) + 1e-7) << "n " << n << " i " << i;
    }
  }
}

// ---- MoE: bf16 experts (exact weights), so the bound is fp32 accumulation only: 1e-4 rel. ----
TEST(CudaMoe, GateUpAndDownMatchReference) {
  ORCHID_REQUIRE_GPU();
  std::mt19937_64 rng(std::random_device{}());
  struct Case {
    int E, k, ff, H;
  };
  for (Case cs : {Case{16, 8, 512, 2048}, Case{5, 3, 96, 128}}) {
    const int S = cs.k + 1, rows_gu = (cs.E + 1) * cs.ff, rows_d = (cs.E + 1) * cs.H;
    auto mk = [&](int rows, int cols) {
      std::vector<float> w = test::random_floats(size_t(rows) * cols, -0.05f, 0.05f, rng);
      for (auto& v : w) v = bf16r(v);
      return w;
    };
    auto wg = mk(rows_gu, cs.H), wu = mk(rows_gu, cs.H), wd = mk(rows_d, cs.ff);
    auto pack = [](const std::vector<float>& w, int rows, int cols, int& units) {
      units = (cols + 7) / 8;
      std::vector<uint16_t> out(size_t(rows) * units * 8, 0);
      for (int r = 0; r < rows; ++r)
        for (int c = 0; c < cols; ++c)
          out[size_t(r) * units * 8 + c] = f32_to_bf16(w[size_t(r) * cols + c]);
      return out;
    };
    int ug, uu, ud;
    DevBuf<uint16_t> bg(pack(wg, rows_gu, cs.H, ug)), bu(pack(wu, rows_gu, cs.H, uu)),
        bd(pack(wd, rows_d, cs.ff, ud));
    auto x = test::random_floats(size_t(cs.H), -2.f, 2.f, rng);
    auto norm = test::random_floats(size_t(cs.H), 0.5f, 1.5f, rng);
    std::vector<int> sel(static_cast<size_t>(S));
    for (int i = 0; i < cs.k; ++i) sel[size_t(i)] = int(rng() % uint64_t(cs.E));
    sel[size_t(cs.k)] = cs.E;
    auto sw = test::random_floats(size_t(S), 0.f, 1.f, rng);
    const int act_stride = (cs.ff + 31) / 32 * 32;
    DevBuf<float> dx(x), dn(norm), dsw(sw), dact(std::vector<float>(size_t(S) * act_stride, 0.f)),
        dh(x);
    DevBuf<int> dsel(sel);
    cuda::MoeParams p;
    p.gate = {bg.get(), nullptr, rows_gu, cs.H, ug, 0, cuda::DevFormat::bf16};
    p.up = {bu.get(), nullptr, rows_gu, cs.H, uu, 0, cuda::DevFormat::bf16};
    p.down = {bd.get(), nullptr, rows_d, cs.ff, ud, 0, cuda::DevFormat::bf16};
    p.n_ff = cs.ff, p.n_embd = cs.H, p.n_slot = S, p.x = dx.get(), p.norm = dn.get();
    p.sel = dsel.get(), p.sel_w = dsw.get(), p.act = dact.get(), p.h = dh.get();
    ASSERT_TRUE(cuda::launch_moe_gate_up(p, nullptr).ok());
    ASSERT_TRUE(cuda::launch_moe_down(p, nullptr).ok());
    ORCHID_CUDA_OK(cudaDeviceSynchronize());
    // Reference.
    double ss = 0;
    for (float v : x) ss += double(v) * v;
    const double inv = 1 / std::sqrt(ss / cs.H + 1e-6);
    std::vector<double> xh(static_cast<size_t>(cs.H));
    for (int c = 0; c < cs.H; ++c) xh[size_t(c)] = x[size_t(c)] * inv * norm[size_t(c)];
    std::vector<double> act(size_t(S) * cs.ff);
    for (int s = 0; s < S; ++s)
      for (int i = 0; i < cs.ff; ++i) {
        double g = 0, u = 0;
        const size_t row = size_t(sel[size_t(s)]) * cs.ff + i;
        for (int c = 0; c < cs.H; ++c)
          g += wg[row * cs.H + c] * xh[size_t(c)], u += wu[row * cs.H + c] * xh[size_t(c)];
        act[size_t(s) * cs.ff + i] = silu(g) * u;
      }
    auto got_act = dact.host();
    for (int s = 0; s < S; ++s)
      for (int i = 0; i < cs.ff; ++i) {
        const double want = act[size_t(s) * cs.ff + i];
        EXPECT_NEAR(got_act[size_t(s) * act_stride + i], want, 1e-4 * (std::fabs(want) + 0.01))
            << "act slot " << s << " row " << i;
      }
    auto h = dh.host();
    int bad = 0;
    for (int r = 0; r < cs.H; ++r) {
      double want = x[size_t(r)], mag = std::fabs(want);
      for (int s = 0; s < S; ++s) {
        double y = 0;
        const size_t row = size_t(sel[size_t(s)]) * cs.H + r;
        for (int i = 0; i < cs.ff; ++i) y += wd[row * cs.ff + i] * act[size_t(s) * cs.ff + i];
        want += sw[size_t(s)] * y;
        mag += std::fabs(sw[size_t(s)] * y);
      }
      if (std::fabs(h[size_t(r)] - want) > 1e-4 * mag + 1e-6 && bad++ < 5)
        ADD_FAILURE() << "down row " << r << ": " << h[size_t(r)] << " vs " << want;
    }
  }
}

// ---- Attention: K/V rounded to bf16 on both sides; bound 1e-4 abs on outputs in (-1, 1). ----
struct AttnCase {
  int nh, nkv, hd, n_rot, pos, n_split;
};

TEST(CudaAttention, DecodeMatchesReference) {
  ORCHID_REQUIRE_GPU();
  std::mt19937_64 rng(std::random_device{}());
  for (AttnCase cs : {AttnCase{16, 2, 256, 64, 0, 1}, AttnCase{16, 2, 256, 64, 40, 1},
                      AttnCase{16, 2, 256, 64, 1500, 1}, AttnCase{16, 2, 256, 64, 1500, 8},
                      AttnCase{16, 2, 256, 64, 9000, 64}, AttnCase{16, 2, 256, 64, 9000, 20},
                      AttnCase{16, 2, 256, 64, 20000, 128}, AttnCase{6, 2, 48, 24, 77, 1},
                      AttnCase{6, 2, 48, 24, 77, 4}, AttnCase{6, 2, 64, 32, 77, 4},
                      AttnCase{4, 4, 128, 64, 300, 2}}) {
    const int G = cs.nh / cs.nkv, hd = cs.hd, cap = cs.pos + 1;
    auto qg = test::random_floats(size_t(cs.nh) * 2 * hd, -1.f, 1.f, rng);
    auto k = test::random_floats(size_t(cs.nkv) * hd, -1.f, 1.f, rng);
    auto v = test::random_floats(size_t(cs.nkv) * hd, -1.f, 1.f, rng);
    auto qn = test::random_floats(size_t(hd), 0.5f, 1.5f, rng);
    auto kn = test::random_floats(size_t(hd), 0.5f, 1.5f, rng);
    std::vector<float> inv_freq(static_cast<size_t>(cs.n_rot / 2));
    for (int i = 0; i < cs.n_rot / 2; ++i)
      inv_freq[size_t(i)] = float(1.0 / std::pow(1e7, double(2 * i) / cs.n_rot));
    std::vector<uint16_t> kc(size_t(cap) * cs.nkv * hd), vc(kc.size());
    for (auto& b : kc) b = f32_to_bf16(std::uniform_real_distribution<float>(-2.f, 2.f)(rng));
    for (auto& b : vc) b = f32_to_bf16(std::uniform_real_distribution<float>(-1.f, 1.f)(rng));
    DevBuf<float> dqg(qg), dk(k), dv(v), dqn(qn), dkn(kn), dfreq(inv_freq),
        dout(size_t(cs.nh) * hd);
    DevBuf<float> pacc(size_t(cs.nkv) * cs.n_split * G * hd),
        pml(size_t(cs.nkv) * cs.n_split * G * 2);
    DevBuf<uint16_t> dkc(kc), dvc(vc);
    DevBuf<int> dpos(std::vector<int>{cs.pos});
    cuda::AttnParams p;
    p.qg = dqg.get(), p.k = dk.get(), p.v = dv.get(), p.q_norm = dqn.get(), p.k_norm = dkn.get();
    p.inv_freq = dfreq.get(), p.n_head = cs.nh, p.n_head_kv = cs.nkv, p.hd = hd, p.n_rot = cs.n_rot;
    p.kc = dkc.get(), p.vc = dvc.get(), p.pos = dpos.get(), p.out = dout.get();
    p.n_split = cs.n_split, p.part_acc = pacc.get(), p.part_ml = pml.get();
    // The unfused q/k path (three kernels, ORCHID_FUSED_QK=0) on copies: the same bits.
    {
      DevBuf<float> qg2(qg), kw(size_t(cs.nkv) * hd);
      DevBuf<uint16_t> kc2(kc), vc2(vc);
      cuda::AttnParams u = p;
      u.qg = qg2.get(), u.kc = kc2.get(), u.vc = vc2.get(), u.k_work = kw.get();
      ASSERT_TRUE(cuda::launch_qk_norm_rope_kv(u, nullptr).ok());
      ASSERT_TRUE(cuda::launch_qk_norm_rope_kv(p, nullptr).ok());
      ORCHID_CUDA_OK(cudaDeviceSynchronize());
      EXPECT_EQ(qg2.host(), dqg.host()) << "unfused q";
      EXPECT_EQ(kc2.host(), dkc.host()) << "unfused K cache";
      EXPECT_EQ(vc2.host(), dvc.host()) << "unfused V cache";
    }
    // The three score paths (CUDA cores; tensor cores at 4 warps a block; tensor cores at 8 where
    // the grid fits one block an SM) on the same normed q and cache, the output poisoned (NaN)
    // before each launch so that a dim no block writes fails. 20 ranges (9,001 keys in 282 tiles
    // of 32, 15 tiles per range): the last range is empty, as are ranges 57-63 of the 64-range
    // case; 128 ranges of 2 KV heads take more blocks than the H200's 132 SMs (4 warps either way).
    std::vector<std::vector<float>> outs;
    const bool saved_mma = cuda::attention_mma_enabled(),
               saved_wide = cuda::attention_wide_enabled();
    for (auto [mma, wide] : {std::pair{false, false}, {true, false}, {true, true}}) {
      cuda::set_attention_mma_enabled(mma);
      cuda::set_attention_wide_enabled(wide);
      ORCHID_CUDA_OK(cudaMemset(dout.get(), 0xff, dout.bytes()));
      ORCHID_CUDA_OK(cudaMemset(pacc.get(), 0xff, pacc.bytes()));
      ORCHID_CUDA_OK(cudaMemset(pml.get(), 0xff, pml.bytes()));
      const Status st = cuda::launch_attention_decode(p, nullptr);
      cuda::set_attention_mma_enabled(saved_mma);
      cuda::set_attention_wide_enabled(saved_wide);
      ASSERT_TRUE(st.ok()) << st.message();
      ORCHID_CUDA_OK(cudaDeviceSynchronize());
      outs.push_back(dout.host());
    }
    // The q/k and attention launches back to back on one stream, as in a decode step (the
    // tensor-core kernel requests every key but the newest before its dependency wait, so it
    // overlaps the q/k launch): the newest K/V row poisoned (NaN) beforehand, so a read of it
    // before the q/k kernel wrote it would show. The same bits as the synchronised run.
    if (cuda::attention_mma_enabled()) {
      DevBuf<float> qg4(qg), out4(dout.size()), pacc4(pacc.size()), pml4(pml.size());
      DevBuf<uint16_t> kc4(kc), vc4(vc);
      const size_t row = size_t(cs.pos) * cs.nkv * hd;
      ORCHID_CUDA_OK(cudaMemset(kc4.get() + row, 0xff, size_t(cs.nkv) * hd * 2));
      ORCHID_CUDA_OK(cudaMemset(vc4.get() + row, 0xff, size_t(cs.nkv) * hd * 2));
      cuda::AttnParams o = p;
      o.qg = qg4.get(), o.kc = kc4.get(), o.vc = vc4.get(), o.out = out4.get();
      o.part_acc = pacc4.get(), o.part_ml = pml4.get();
      cudaStream_t st = nullptr;
      ORCHID_CUDA_OK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
      ORCHID_CUDA_OK(cudaDeviceSynchronize());
      const bool ok =
          cuda::launch_qk_norm_rope_kv(o, st).ok() && cuda::launch_attention_decode(o, st).ok();
      ORCHID_CUDA_OK(cudaStreamSynchronize(st));
      ORCHID_CUDA_OK(cudaStreamDestroy(st));
      ASSERT_TRUE(ok);
      EXPECT_EQ(out4.host(), outs[cuda::attention_wide_enabled() ? 2 : 1])
          << "back to back, pos " << cs.pos;
    }
    // Reference: norm + RoPE (double), the new row rounded to bf16 into the cache.
    auto norm_rope = [&](const float* x, const std::vector<float>& w, std::vector<double>& y) {
      double ss = 0;
      for (int d = 0; d < hd; ++d) ss += double(x[d]) * x[d];
      const double inv = 1 / std::sqrt(ss / hd + 1e-6);
      std::vector<double> t(static_cast<size_t>(hd));
      for (int d = 0; d < hd; ++d) t[size_t(d)] = x[d] * inv * w[size_t(d)];
      y = t;
      const int half = cs.n_rot / 2;
      for (int i = 0; i < half; ++i) {
        const double a = double(float(inv_freq[size_t(i)] * float(cs.pos)));
        y[size_t(i)] = t[size_t(i)] * std::cos(a) - t[size_t(i + half)] * std::sin(a);
        y[size_t(i + half)] = t[size_t(i + half)] * std::cos(a) + t[size_t(i)] * std::sin(a);
      }
    };
    for (int g = 0; g < cs.nkv; ++g) {
      std::vector<double> kr;
      norm_rope(k.data() + size_t(g) * hd, kn, kr);
      for (int d = 0; d < hd; ++d) {
        kc[(size_t(cs.pos) * cs.nkv + g) * hd + d] = f32_to_bf16(float(kr[size_t(d)]));
        vc[(size_t(cs.pos) * cs.nkv + g) * hd + d] = f32_to_bf16(v[size_t(g) * hd + d]);
      }
    }
    // The new K row: within one bf16 rounding step of the reference; then the kernel's own
    // row is used below, so the attention check does not depend on that rounding.
    const auto got_kc = dkc.host();
    for (int g = 0; g < cs.nkv; ++g)
      for (int d = 0; d < hd; ++d) {
        const size_t i = (size_t(cs.pos) * cs.nkv + g) * hd + d;
        const float want = bf16_to_f32(kc[i]), got = bf16_to_f32(got_kc[i]);
        EXPECT_LE(std::fabs(got - want), std::fabs(want) / 128 + 1e-6) << "K row dim " << d;
      }
    EXPECT_EQ(dvc.host(), vc) << "V cache row";
    kc = got_kc;
    int bad = 0;
    for (int h = 0; h < cs.nh; ++h) {
      const int g = h / G;
      std::vector<double> q;
      norm_rope(qg.data() + size_t(h) * 2 * hd, qn, q);
      std::vector<double> sc(size_t(cs.pos) + 1);
      double mx = -1e300;
      for (int j = 0; j <= cs.pos; ++j) {
        double s = 0;
        for (int d = 0; d < hd; ++d)
          s += q[size_t(d)] * bf16_to_f32(kc[(size_t(j) * cs.nkv + g) * hd + d]);
        sc[size_t(j)] = s / std::sqrt(double(hd));
        mx = std::max(mx, sc[size_t(j)]);
      }
      double l = 0;
      for (auto& s : sc) l += s = std::exp(s - mx);
      for (int d = 0; d < hd; ++d) {
        double a = 0;
        for (int j = 0; j <= cs.pos; ++j)
          a += sc[size_t(j)] * bf16_to_f32(vc[(size_t(j) * cs.nkv + g) * hd + d]);
        const double want = a / l * sigm(qg[size_t(h) * 2 * hd + hd + d]);
        for (size_t k = 0; k < outs.size(); ++k) {
          const float got = outs[k][size_t(h) * hd + d];
          if (!(std::fabs(got - want) <= 1e-4) && bad++ < 5)  // NaN fails too
            ADD_FAILURE() << (k == 0   ? "CUDA cores"
                              : k == 1 ? "tensor cores"
                                       : "tensor cores, 8 warps")
                          << " pos " << cs.pos << " split " << cs.n_split << " head " << h
                          << " dim " << d << ": " << got << " vs " << want;
        }
      }
    }
  }
}

// ---- Gated DeltaNet: three consecutive steps; bound 1e-4 abs on outputs and state. ----
struct GdnCase {
  int hk, hv, dk, dv;
};

TEST(CudaDeltaNet, StepsMatchReference) {
  ORCHID_REQUIRE_GPU();
  std::mt19937_64 rng(std::random_device{}());
  for (GdnCase cs : {GdnCase{16, 32, 128, 128}, GdnCase{3, 6, 32, 48}, GdnCase{2, 4, 64, 50}}) {
    const int K = 4, kd = cs.hk * cs.dk, vd = cs.hv * cs.dv, C = 2 * kd + vd;
    auto conv_w = test::random_floats(size_t(C) * K, -0.5f, 0.5f, rng);
    auto A_log = test::random_floats(size_t(cs.hv), 0.f, 2.f, rng);
    auto dt_bias = test::random_floats(size_t(cs.hv), -1.f, 1.f, rng);
    auto norm = test::random_floats(size_t(cs.dv), 0.5f, 1.5f, rng);
    DevBuf<float> dconv(conv_w), dA(A_log), ddt(dt_bias), dnorm(norm);
    DevBuf<float> ring(std::vector<float>(size_t(C) * K, 0.f));
    DevBuf<float> S(std::vector<float>(size_t(cs.hv) * cs.dk * cs.dv, 0.f));
    std::vector<double> rS(size_t(cs.hv) * cs.dk * cs.dv, 0.0);
    std::vector<std::vector<float>> hist;  // raw qkv inputs
    for (int pos = 0; pos < 3; ++pos) {
      auto qkv = test::random_floats(size_t(C), -1.f, 1.f, rng);
      auto z = test::random_floats(size_t(vd), -1.f, 1.f, rng);
      auto b = test::random_floats(size_t(cs.hv), -2.f, 2.f, rng);
      auto a = test::random_floats(size_t(cs.hv), -2.f, 2.f, rng);
      hist.push_back(qkv);
      DevBuf<float> dqkv(qkv), dz(z), db(b), da(a), dout(static_cast<size_t>(vd));
      DevBuf<int> dpos(std::vector<int>{pos});
      cuda::GdnParams p;
      p.qkv = dqkv.get(), p.z = dz.get(), p.b = db.get(), p.a = da.get(), p.conv_w = dconv.get();
      p.conv_ring = ring.get(), p.S = S.get(), p.A_log = dA.get(), p.dt_bias = ddt.get();
      p.norm = dnorm.get(), p.pos = dpos.get(), p.hk = cs.hk, p.hv = cs.hv, p.dk = cs.dk;
      p.dv = cs.dv, p.K = K, p.out = dout.get();
      ASSERT_TRUE(cuda::launch_gdn_step(p, nullptr).ok());
      ORCHID_CUDA_OK(cudaDeviceSynchronize());
      // Reference.
      std::vector<double> u(static_cast<size_t>(C));
      for (int c = 0; c < C; ++c) {
        double s = 0;
        for (int j = 0; j < K; ++j) {
          const int t = pos - (K - 1) + j;
          if (t >= 0) s += conv_w[size_t(c) * K + j] * hist[size_t(t)][size_t(c)];
        }
        u[size_t(c)] = silu(s);
      }
      auto l2 = [&](double* x, int n) {
        double ss = 0;
        for (int i = 0; i < n; ++i) ss += x[i] * x[i];
        for (int i = 0; i < n; ++i) x[i] /= std::sqrt(ss + 1e-6);
      };
      for (int h = 0; h < cs.hk; ++h) {
        l2(&u[size_t(h) * cs.dk], cs.dk);
        l2(&u[size_t(kd + h * cs.dk)], cs.dk);
        for (int i = 0; i < cs.dk; ++i) u[size_t(h * cs.dk + i)] /= std::sqrt(double(cs.dk));
      }
      auto got = dout.host();
      int bad = 0;
      for (int j = 0; j < cs.hv; ++j) {
        const int kh = j / (cs.hv / cs.hk);
        const double* q = &u[size_t(kh * cs.dk)];
        const double* kk = &u[size_t(kd + kh * cs.dk)];
        const double* v = &u[size_t(2 * kd + j * cs.dv)];
        const double beta = sigm(b[size_t(j)]);
        const double x = a[size_t(j)] + dt_bias[size_t(j)];
        const double decay =
            std::exp(-std::exp(double(A_log[size_t(j)])) * (x > 20 ? x : std::log1p(std::exp(x))));
        double* Sj = &rS[size_t(j) * cs.dk * cs.dv];
        std::vector<double> o(size_t(cs.dv), 0.0);
        for (int d = 0; d < cs.dv; ++d) {
          double m = 0;
          for (int i = 0; i < cs.dk; ++i) m += (Sj[size_t(i) * cs.dv + d] *= decay) * kk[i];
          const double delta = beta * (v[d] - m);
          for (int i = 0; i < cs.dk; ++i) {
            Sj[size_t(i) * cs.dv + d] += kk[i] * delta;
            o[size_t(d)] += Sj[size_t(i) * cs.dv + d] * q[i];
          }
        }
        double ss = 0;
        for (double w : o) ss += w * w;
        const double inv = 1 / std::sqrt(ss / cs.dv + 1e-6);
        for (int d = 0; d < cs.dv; ++d) {
          const double want = o[size_t(d)] * inv * norm[size_t(d)] * silu(z[size_t(j) * cs.dv + d]);
          if (std::fabs(got[size_t(j) * cs.dv + d] - want) > 1e-4 && bad++ < 5)
            ADD_FAILURE() << "pos " << pos << " head " << j << " dim " << d << ": "
                          << got[size_t(j) * cs.dv + d] << " vs " << want;
        }
      }
      auto gS = S.host();
      double worst = 0;
      for (size_t i = 0; i < gS.size(); ++i) worst = std::max(worst, std::fabs(gS[i] - rS[i]));
      EXPECT_LE(worst, 1e-4) << "state after position " << pos;
    }
  }
}

}  // namespace
}  // namespace orchid

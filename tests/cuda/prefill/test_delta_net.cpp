// Gated DeltaNet over a chunk (prefill/delta_net_scan.cu) against a double-precision reference of the
// whole chunk, against the decode kernel run once a token, and against itself split into two
// chunks; real and odd shapes, fresh random inputs, chunks at position 0 and after a history. The
// scan's chunked form (prefill/delta_net_chunked.cu) against the same reference and bounds, against the
// sequential form on the same input, and split at chunk boundaries.
//
// Bounds. The device computes in fp32 with short sums (K conv taps, dk ≤ 128 rows, dv ≤ 128
// columns). The delta rule does not amplify rounding errors over the steps: the decay is ≤ 1 and
// I − β k̂k̂ᵀ (‖k̂‖ = 1, 0 < β < 1) has eigenvalues in [0, 1], so each step adds its own ~1e-7
// relative error to a state that shrinks the old ones. Hence:
//   conv_out (conv + SiLU, L2 norms), β, decay: a few roundings each → rel L2 ≤ 1e-5;
//   o and S after up to 300 steps: ≤ 300 steps × ~1e-7 → rel L2 ≤ 1e-4;
//   every element of those within 1e-3 (conv_out 1e-4) of the tensor's RMS (catches a wrong
//   column or token that the L2 norm would average away);
//   out, fp16: rounding ≤ 2^-11 relative (bound 2^-10), plus the fp32 error of the normalised
//   o (≤ 1e-3 of its unit RMS, as above) times |norm · silu(z)|, plus 2^-24 (fp16 subnormals).
// The chunked form's tensor-core products are bf16x3 (operands split into bf16 hi + lo, 2^-18
// relative; lo·lo dropped): ≤ ~1e-5 relative per product, a few 1e-6 typically, and a chunk of 64
// tokens is one step of a recurrence that contracts as above, so the error does not grow with the
// chunks (a host emulation of the kernels: ~1e-5 rel. L2 on o and S from 150 to 1,000 tokens;
// tests/backend/test_delta_net_chunk_tile.cpp runs the scan block's partition on the CPU) and the
// same bounds hold. The two forms against each other: twice the bounds (each is within them
// of the reference).
#include <cmath>
#include <cstring>
#include <limits>

#include "../cuda_test_util.h"
#include "orchid/backend/cuda/prefill/prefill_kernels.h"

namespace orchid {
namespace {

using test::DevBuf;

constexpr int kK = 4;  // conv taps
constexpr double kConvBound = 1e-5, kConvElemBound = 1e-4;
constexpr double kScanBound = 1e-4, kScanElemBound = 1e-3;

double silu(double x) {
  return x / (1 + std::exp(-x));
}
double sigm(double x) {
  return 1 / (1 + std::exp(-x));
}

struct Shape {
  int hk, hv, dk, dv;
};
constexpr Shape kReal{16, 32, 128, 128};
constexpr Shape kOdd[] = {{3, 6, 32, 48}, {2, 4, 64, 50}};

// One layer's weights (host).
struct Layer {
  Shape sh;
  int kd, vd, C;                                    // key dim, value dim, conv_dim
  std::vector<float> conv_w, A_log, dt_bias, norm;  // [C, K], [hv], [hv], [dv]
};
// Ranges as in the checkpoints: A_log = log(1 … 16)-ish and dt_bias ≈ −5 give decays near 1
// (long memory, the case where errors could pile up); the rest reach decays near 0.
Layer random_layer(Shape sh, std::mt19937_64& rng) {
  Layer L{sh, sh.hk * sh.dk, sh.hv * sh.dv, 2 * sh.hk * sh.dk + sh.hv * sh.dv, {}, {}, {}, {}};
  L.conv_w = test::random_floats(size_t(L.C) * kK, -0.5f, 0.5f, rng);
  L.A_log = test::random_floats(size_t(sh.hv), -1.f, 2.5f, rng);
  L.dt_bias = test::random_floats(size_t(sh.hv), -6.f, 1.f, rng);
  L.norm = test::random_floats(size_t(sh.dv), 0.5f, 1.5f, rng);
  return L;
}

// One chunk's inputs: qkv [T, C], z [T, vd], b and a [T, hv].
struct Chunk {
  int T;
  std::vector<float> qkv, z, b, a;
};
Chunk random_chunk(const Layer& L, int T, std::mt19937_64& rng) {
  return {T, test::random_floats(size_t(T) * L.C, -1.f, 1.f, rng),
          test::random_floats(size_t(T) * L.vd, -2.f, 2.f, rng),
          test::random_floats(size_t(T) * L.sh.hv, -3.f, 3.f, rng),
          test::random_floats(size_t(T) * L.sh.hv, -3.f, 3.f, rng)};
}

// What the reference carries between chunks: every raw qkv row so far ([pos, C]) and the state.
struct History {
  int pos = 0;
  std::vector<float> raw;
  std::vector<double> S;  // [hv, dk, dv]
};

// The reference's outputs for a chunk; out before the fp16 rounding.
struct RefChunk {
  std::vector<double> conv_out, beta, decay, o, out;
};

// The whole chunk in double precision, token by token (spec §6.2–6.8); advances h.
RefChunk reference(const Layer& L, History& h, const Chunk& c) {
  const auto [hk, hv, dk, dv] = L.sh;
  const int C = L.C, kd = L.kd, vd = L.vd, T = c.T;
  h.raw.insert(h.raw.end(), c.qkv.begin(), c.qkv.end());
  RefChunk r{std::vector<double>(size_t(T) * C), std::vector<double>(size_t(T) * hv),
             std::vector<double>(size_t(T) * hv), std::vector<double>(size_t(T) * vd),
             std::vector<double>(size_t(T) * vd)};
  for (int t = 0; t < T; ++t) {
    const int pos = h.pos + t;
    double* u = &r.conv_out[size_t(t) * C];
    for (int ch = 0; ch < C; ++ch) {
      double s = 0;
      for (int j = 0; j < kK; ++j)
        if (const int at = pos - (kK - 1) + j; at >= 0)
          s += double(L.conv_w[size_t(ch) * kK + j]) * h.raw[size_t(at) * C + ch];
      u[ch] = silu(s);
    }
    for (int v = 0; v < 2 * hk; ++v) {  // q heads, then k heads
      double* x = u + size_t(v) * dk;
      double ss = 0;
      for (int i = 0; i < dk; ++i) ss += x[i] * x[i];
      const double scale = 1 / std::sqrt(ss + 1e-6) / (v < hk ? std::sqrt(double(dk)) : 1.0);
      for (int i = 0; i < dk; ++i) x[i] *= scale;
    }
    for (int j = 0; j < hv; ++j) {
      const size_t at = size_t(t) * hv + j;
      const double x = double(c.a[at]) + L.dt_bias[size_t(j)];
      r.beta[at] = sigm(c.b[at]);
      r.decay[at] =
          std::exp(-std::exp(double(L.A_log[size_t(j)])) * (x > 20 ? x : std::log1p(std::exp(x))));
      const int kh = j / (hv / hk);
      const double *q = u + size_t(kh) * dk, *k = u + kd + size_t(kh) * dk;
      const double* v = u + 2 * kd + size_t(j) * dv;
      double* S = &h.S[size_t(j) * dk * dv];
      double* o = &r.o[size_t(t) * vd + size_t(j) * dv];
      for (int d = 0; d < dv; ++d) {
        double m = 0;
        for (int i = 0; i < dk; ++i) m += (S[size_t(i) * dv + d] *= r.decay[at]) * k[i];
        const double delta = r.beta[at] * (v[d] - m);
        o[d] = 0;
        for (int i = 0; i < dk; ++i) o[d] += (S[size_t(i) * dv + d] += k[i] * delta) * q[i];
      }
      double ss = 0;
      for (int d = 0; d < dv; ++d) ss += o[d] * o[d];
      const double inv = 1 / std::sqrt(ss / dv + 1e-6);
      for (int d = 0; d < dv; ++d) {
        const size_t e = size_t(t) * vd + size_t(j) * dv + d;
        r.out[e] = o[d] * inv * L.norm[size_t(d)] * silu(c.z[e]);
      }
    }
  }
  h.pos += T;
  return r;
}

// A history of `len` random tokens from the zero state, its state rounded to fp32 (what the
// device holds), so that device and reference continue from the same numbers.
History random_history(const Layer& L, int len, std::mt19937_64& rng) {
  History h{0, {}, std::vector<double>(size_t(L.sh.hv) * L.sh.dk * L.sh.dv, 0.0)};
  if (len > 0) reference(L, h, random_chunk(L, len, rng));
  for (double& s : h.S) s = double(float(s));
  return h;
}

// The device ring after h: slot p % K holds raw input p for the last K positions p ≥ 0; slots of
// positions before the sequence hold NaN (never read, never written).
std::vector<float> ring_of(const Layer& L, const History& h) {
  std::vector<float> ring(size_t(L.C) * kK, std::numeric_limits<float>::quiet_NaN());
  for (int p = std::max(0, h.pos - kK); p < h.pos; ++p)
    for (int ch = 0; ch < L.C; ++ch) ring[size_t(ch) * kK + p % kK] = h.raw[size_t(p) * L.C + ch];
  return ring;
}
std::vector<float> state_of(const History& h) {
  return std::vector<float>(h.S.begin(), h.S.end());
}

// Device copies of the weights, of one chunk's inputs and of its outputs (NaN-poisoned).
struct DevLayer {
  DevBuf<float> conv_w, A_log, dt_bias, norm;
  explicit DevLayer(const Layer& L)
      : conv_w(L.conv_w), A_log(L.A_log), dt_bias(L.dt_bias), norm(L.norm) {}
};
struct DevChunk {
  int T;
  DevBuf<float> qkv, z, b, a;
  DevBuf<float> conv_out, beta, decay, o;
  DevBuf<uint16_t> out;
  DevChunk(const Layer& L, const Chunk& c)
      : T(c.T),
        qkv(c.qkv),
        z(c.z),
        b(c.b),
        a(c.a),
        conv_out(size_t(c.T) * L.C),
        beta(size_t(c.T) * L.sh.hv),
        decay(size_t(c.T) * L.sh.hv),
        o(size_t(c.T) * L.vd),
        out(size_t(c.T) * L.vd) {}
};

// The chunked form's scratch for T tokens (poisoned: no tile may be read before it is written).
struct ChunkScratch {
  DevBuf<uint8_t> buf;
  ChunkScratch(const Layer& L, int T) : buf(cuda::gdn_chunked_scratch_bytes(T, L.sh.hk, L.sh.hv)) {}
};

// Parameters for tokens [t0, t0 + T) of `c` at absolute position pos0 (a sub-chunk: every
// per-token pointer moves by t0 rows); the chunked form when given its scratch.
cuda::GdnPrefillParams params(const Layer& L, const DevLayer& w, const DevChunk& c,
                              DevBuf<float>& ring, DevBuf<float>& S, int pos0, int t0, int T,
                              ChunkScratch* chunked = nullptr) {
  const int hv = L.sh.hv;
  cuda::GdnPrefillParams p;
  p.qkv = c.qkv.get() + size_t(t0) * L.C, p.z = c.z.get() + size_t(t0) * L.vd;
  p.b = c.b.get() + size_t(t0) * hv, p.a = c.a.get() + size_t(t0) * hv;
  p.conv_w = w.conv_w.get(), p.conv_ring = ring.get(), p.S = S.get();
  p.A_log = w.A_log.get(), p.dt_bias = w.dt_bias.get(), p.norm = w.norm.get();
  p.hk = L.sh.hk, p.hv = hv, p.dk = L.sh.dk, p.dv = L.sh.dv, p.K = kK, p.eps = 1e-6f;
  p.pos0 = pos0, p.T = T;
  p.conv_out = c.conv_out.get() + size_t(t0) * L.C;
  p.beta = c.beta.get() + size_t(t0) * hv, p.decay = c.decay.get() + size_t(t0) * hv;
  p.o = c.o.get() + size_t(t0) * L.vd, p.out = c.out.get() + size_t(t0) * L.vd;
  if (chunked) p.form = cuda::GdnScanForm::chunked, p.chunk_scratch = chunked->buf.get();
  return p;
}

// ‖got − want‖ / ‖want‖ and the worst element's error over want's RMS (NaN anywhere → NaN).
struct Diff {
  double rel_l2 = 0, worst = 0;
  size_t worst_at = 0;
};
template <class G, class W>
Diff diff(const std::vector<G>& got, const std::vector<W>& want) {
  double e2 = 0, w2 = 0;
  Diff d;
  for (size_t i = 0; i < want.size(); ++i) {
    const double e = std::fabs(double(got[i]) - double(want[i]));
    e2 += e * e, w2 += double(want[i]) * want[i];
    if (!(e <= d.worst)) d.worst = e, d.worst_at = i;
  }
  const double rms = std::sqrt(w2 / double(want.size()));
  d.rel_l2 = std::sqrt(e2 / w2), d.worst /= rms;
  return d;
}
#define EXPECT_DIFF(got, want, l2_bound, elem_bound, what)                               \
  do {                                                                                   \
    const auto& g_ = (got);                                                              \
    const auto& w_ = (want);                                                             \
    const Diff d_ = diff(g_, w_);                                                        \
    EXPECT_LE(d_.rel_l2, l2_bound) << what << ": rel L2";                                \
    EXPECT_LE(d_.worst, elem_bound) << what << ": worst element " << d_.worst_at << ": " \
                                    << g_[d_.worst_at] << " vs " << w_[d_.worst_at];     \
  } while (0)

// The fp16 output against a value that has the fp32 error budget of the header (o_budget: the
// normalised o's error; twice it between two device results).
bool out_ok(double got, double want, double norm_d, double z, double o_budget = 1e-3) {
  const double tol = std::ldexp(std::fabs(want), -10) + o_budget * std::fabs(norm_d * silu(z)) +
                     std::ldexp(1.0, -24);
  return std::fabs(got - want) <= tol;
}

std::string where(Shape sh, int pos0, int T) {
  return "shape " + std::to_string(sh.hk) + "/" + std::to_string(sh.hv) + "/" +
         std::to_string(sh.dk) + "/" + std::to_string(sh.dv) + " pos0 " + std::to_string(pos0) +
         " T " + std::to_string(T);
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The chunked form's tests skip on GPUs whose blocks cannot have its shared memory.
#define ORCHID_REQUIRE_CHUNKED_FORM()                                                       \
  do {                                                                                      \
    ORCHID_REQUIRE_GPU();                                                                   \
    if (!cuda::gdn_chunked_supported())                                                     \
      GTEST_SKIP() << "the chunked DeltaNet form needs more shared memory than this GPU's"; \
  } while (0)

// ---- Each chunk against the double reference: every output, the final state and ring. ----
// T 63, 64, 65: one token short of, exactly and one past a chunk of the chunked form; 150 and 300:
// three and five chunks, the last partial. pos0 37 starts from a non-zero state.
void expect_matches_reference(bool chunked) {
  std::mt19937_64 rng(std::random_device{}());
  std::vector<Shape> shapes{kReal};
  shapes.insert(shapes.end(), std::begin(kOdd), std::end(kOdd));
  for (Shape sh : shapes) {
    const Layer L = random_layer(sh, rng);
    const DevLayer w(L);
    // pos0 2: part of the window lies before the sequence (the ring's NaN slots must stay unread).
    for (int pos0 : {0, 2, 37}) {
      if (sh.dk == kReal.dk && pos0 == 2) continue;  // the odd shapes cover it, cheaper
      const History start = random_history(L, pos0, rng);
      for (int T : {1, 3, 63, 64, 65, 150, 300}) {
        const std::string at = where(sh, pos0, T) + (chunked ? " chunked" : " sequential");
        const Chunk c = random_chunk(L, T, rng);
        DevChunk dc(L, c);
        DevBuf<float> ring(ring_of(L, start)), S(state_of(start));
        ChunkScratch scratch(L, T);
        ASSERT_TRUE(
            cuda::launch_gdn_prefill(
                params(L, w, dc, ring, S, pos0, 0, T, chunked ? &scratch : nullptr), nullptr)
                .ok())
            << at;
        ORCHID_CUDA_OK(cudaDeviceSynchronize());
        History h = start;
        const RefChunk r = reference(L, h, c);
        EXPECT_DIFF(dc.conv_out.host(), r.conv_out, kConvBound, kConvElemBound, at << " conv_out");
        EXPECT_DIFF(dc.beta.host(), r.beta, kConvBound, kConvElemBound, at << " beta");
        EXPECT_DIFF(dc.decay.host(), r.decay, kConvBound, kConvElemBound, at << " decay");
        EXPECT_DIFF(dc.o.host(), r.o, kScanBound, kScanElemBound, at << " o");
        EXPECT_DIFF(S.host(), h.S, kScanBound, kScanElemBound, at << " S");
        EXPECT_TRUE(same_bits(ring.host(), ring_of(L, h))) << at << " ring";
        const auto out = dc.out.host();
        int bad = 0;
        for (size_t e = 0; e < out.size(); ++e)
          if (!out_ok(f16_to_f32(out[e]), r.out[e], L.norm[e % size_t(sh.dv)], c.z[e]) && bad++ < 5)
            ADD_FAILURE() << at << " out " << e << ": " << f16_to_f32(out[e]) << " vs " << r.out[e];
      }
    }
  }
}

// ---- The exact path's remainder (out_lo). ----
// Asked for, the gated norm keeps out's fp16 bits and writes what their rounding dropped: hi + lo
// is its fp32 value, recomputed here from the device's own o within a few fp32 roundings, expf and
// rsqrt (2^-19), where hi alone is up to 2^-12 off.
TEST(CudaDeltaNetPrefill, WritesTheExactRemainder) {
  ORCHID_REQUIRE_GPU();
  std::mt19937_64 rng(std::random_device{}());
  const int pos0 = 3, T = 65;
  for (Shape sh : {kReal, kOdd[0]}) {
    const std::string at = where(sh, pos0, T);
    const Layer L = random_layer(sh, rng);
    const DevLayer w(L);
    const History start = random_history(L, pos0, rng);
    const Chunk c = random_chunk(L, T, rng);
    DevChunk alone(L, c), split(L, c);
    DevBuf<uint16_t> lo(size_t(T) * L.vd);
    for (DevChunk* dc : {&alone, &split}) {
      DevBuf<float> ring(ring_of(L, start)), S(state_of(start));
      cuda::GdnPrefillParams p = params(L, w, *dc, ring, S, pos0, 0, T);
      if (dc == &split) p.out_lo = lo.get();
      ASSERT_TRUE(cuda::launch_gdn_prefill(p, nullptr).ok()) << at;
      ORCHID_CUDA_OK(cudaDeviceSynchronize());
    }
    const auto hi = split.out.host(), rem = lo.host();
    const auto o = split.o.host();
    EXPECT_TRUE(hi == alone.out.host()) << at << ": out's bits";
    int bad = 0;
    for (int row = 0; row < T * sh.hv; ++row) {
      const size_t base = size_t(row) * sh.dv;
      double ss = 0;
      for (int d = 0; d < sh.dv; ++d) ss += double(o[base + d]) * o[base + d];
      const double inv = 1 / std::sqrt(ss / sh.dv + 1e-6);
      for (int d = 0; d < sh.dv; ++d) {
        const size_t e = base + size_t(d);
        const double want = o[e] * inv * L.norm[size_t(d)] * silu(c.z[e]);
        const double got = double(f16_to_f32(hi[e])) + f16_to_f32(rem[e]);
        if (!(std::fabs(got - want) <= std::ldexp(std::fabs(want), -19) + std::ldexp(1.0, -25)) &&
            bad++ < 5)
          ADD_FAILURE() << at << " out " << e << ": " << got << " vs " << want;
      }
    }
  }
}

TEST(CudaDeltaNetPrefill, MatchesReference) {
  ORCHID_REQUIRE_GPU();
  expect_matches_reference(false);
}

TEST(CudaDeltaNetPrefill, ChunkedMatchesReference) {
  ORCHID_REQUIRE_CHUNKED_FORM();
  expect_matches_reference(true);
}

// ---- The two forms on the same input, from a non-zero state: the stages before the scan are the
// same kernels (the same bits); o, S and out within the sum of the two forms' error budgets.
// 1,000 tokens: 16 chunks through the scan kernel's tile pipeline. ----
TEST(CudaDeltaNetPrefill, ChunkedMatchesSequential) {
  ORCHID_REQUIRE_CHUNKED_FORM();
  std::mt19937_64 rng(std::random_device{}());
  std::vector<Shape> shapes{kReal};
  shapes.insert(shapes.end(), std::begin(kOdd), std::end(kOdd));
  const int pos0 = 37;
  for (Shape sh : shapes) {
    const Layer L = random_layer(sh, rng);
    const DevLayer w(L);
    const History start = random_history(L, pos0, rng);
    for (int T : {65, 300, 1000}) {
      const std::string at = where(sh, pos0, T);
      const Chunk c = random_chunk(L, T, rng);
      DevChunk seq(L, c), chk(L, c);
      DevBuf<float> ring(ring_of(L, start)), S(state_of(start));
      DevBuf<float> ring2(ring_of(L, start)), S2(state_of(start));
      ChunkScratch scratch(L, T);
      ASSERT_TRUE(cuda::launch_gdn_prefill(params(L, w, seq, ring, S, pos0, 0, T), nullptr).ok());
      ASSERT_TRUE(
          cuda::launch_gdn_prefill(params(L, w, chk, ring2, S2, pos0, 0, T, &scratch), nullptr)
              .ok());
      ORCHID_CUDA_OK(cudaDeviceSynchronize());
      EXPECT_TRUE(same_bits(chk.conv_out.host(), seq.conv_out.host())) << at << " conv_out";
      EXPECT_TRUE(same_bits(chk.beta.host(), seq.beta.host())) << at << " beta";
      EXPECT_TRUE(same_bits(chk.decay.host(), seq.decay.host())) << at << " decay";
      EXPECT_TRUE(same_bits(ring2.host(), ring.host())) << at << " ring";
      EXPECT_DIFF(chk.o.host(), seq.o.host(), 2 * kScanBound, 2 * kScanElemBound, at << " o");
      EXPECT_DIFF(S2.host(), S.host(), 2 * kScanBound, 2 * kScanElemBound, at << " S");
      const auto got = chk.out.host(), want = seq.out.host();
      int bad = 0;
      for (size_t e = 0; e < got.size(); ++e)
        if (!out_ok(f16_to_f32(got[e]), f16_to_f32(want[e]), L.norm[e % size_t(sh.dv)], c.z[e],
                    2e-3) &&
            bad++ < 5)
          ADD_FAILURE() << at << " out " << e << ": " << f16_to_f32(got[e]) << " vs "
                        << f16_to_f32(want[e]);
    }
  }
}

// ---- The chunked form split at chunk boundaries (64, 128 of 200 tokens) equals one launch bit for
// bit: every chunk's tiles are the same arithmetic, and the state passes through memory in fp32
// exactly as it would stay in registers. ----
TEST(CudaDeltaNetPrefill, ChunkedSplitAtChunksEqualsOne) {
  ORCHID_REQUIRE_CHUNKED_FORM();
  std::mt19937_64 rng(std::random_device{}());
  const int pos0 = 3, T = 200;
  for (Shape sh : {kReal, kOdd[1]}) {
    const Layer L = random_layer(sh, rng);
    const DevLayer w(L);
    const History start = random_history(L, pos0, rng);
    const Chunk c = random_chunk(L, T, rng);
    DevChunk one(L, c);
    DevBuf<float> ring(ring_of(L, start)), S(state_of(start));
    ChunkScratch scratch(L, T);
    ASSERT_TRUE(
        cuda::launch_gdn_prefill(params(L, w, one, ring, S, pos0, 0, T, &scratch), nullptr).ok());
    ORCHID_CUDA_OK(cudaDeviceSynchronize());
    for (int T1 : {64, 128}) {
      const std::string at = where(sh, pos0, T) + " chunked, split at " + std::to_string(T1);
      DevChunk two(L, c);
      DevBuf<float> ring2(ring_of(L, start)), S2(state_of(start));
      ASSERT_TRUE(
          cuda::launch_gdn_prefill(params(L, w, two, ring2, S2, pos0, 0, T1, &scratch), nullptr)
              .ok());
      ASSERT_TRUE(cuda::launch_gdn_prefill(
                      params(L, w, two, ring2, S2, pos0 + T1, T1, T - T1, &scratch), nullptr)
                      .ok());
      ORCHID_CUDA_OK(cudaDeviceSynchronize());
      EXPECT_TRUE(same_bits(two.o.host(), one.o.host())) << at << " o";
      EXPECT_TRUE(two.out.host() == one.out.host()) << at << " out";
      EXPECT_TRUE(same_bits(S2.host(), S.host())) << at << " S";
    }
  }
}

// ---- The chunked form over consecutive launches of odd lengths (150, 1, 65 tokens: partial chunks
// at the end of each), the state and ring carried between them in memory, against the double
// reference of the whole sequence. ----
TEST(CudaDeltaNetPrefill, ChunkedLaunchesCarryTheState) {
  ORCHID_REQUIRE_CHUNKED_FORM();
  std::mt19937_64 rng(std::random_device{}());
  for (Shape sh : {kReal, kOdd[0]}) {
    const Layer L = random_layer(sh, rng);
    const DevLayer w(L);
    History h = random_history(L, 5, rng);
    DevBuf<float> ring(ring_of(L, h)), S(state_of(h));
    for (int T : {150, 1, 65}) {
      const std::string at = where(sh, h.pos, T) + " chunked, after the launches before";
      const Chunk c = random_chunk(L, T, rng);
      DevChunk dc(L, c);
      ChunkScratch scratch(L, T);
      ASSERT_TRUE(
          cuda::launch_gdn_prefill(params(L, w, dc, ring, S, h.pos, 0, T, &scratch), nullptr).ok())
          << at;
      ORCHID_CUDA_OK(cudaDeviceSynchronize());
      const RefChunk r = reference(L, h, c);
      EXPECT_DIFF(dc.o.host(), r.o, kScanBound, kScanElemBound, at << " o");
      EXPECT_DIFF(S.host(), h.S, kScanBound, kScanElemBound, at << " S");
    }
  }
}

// ---- One chunk against the decode kernel run once a token from the same start. ----
TEST(CudaDeltaNetPrefill, MatchesDecodeSteps) {
  ORCHID_REQUIRE_GPU();
  std::mt19937_64 rng(std::random_device{}());
  std::vector<Shape> shapes{kReal};
  shapes.insert(shapes.end(), std::begin(kOdd), std::end(kOdd));
  const int pos0 = 5, T = 40;
  for (Shape sh : shapes) {
    const std::string at = where(sh, pos0, T);
    const Layer L = random_layer(sh, rng);
    const DevLayer w(L);
    const History start = random_history(L, pos0, rng);
    const Chunk c = random_chunk(L, T, rng);
    DevChunk dc(L, c);
    DevBuf<float> ring(ring_of(L, start)), S(state_of(start));
    ASSERT_TRUE(cuda::launch_gdn_prefill(params(L, w, dc, ring, S, pos0, 0, T), nullptr).ok());

    DevBuf<float> step_ring(ring_of(L, start)), step_S(state_of(start));
    DevBuf<float> step_out(size_t(T) * L.vd);
    std::vector<int> positions(T);
    for (int t = 0; t < T; ++t) positions[size_t(t)] = pos0 + t;
    DevBuf<int> dpos(positions);
    for (int t = 0; t < T; ++t) {
      cuda::GdnParams p;
      p.qkv = dc.qkv.get() + size_t(t) * L.C, p.z = dc.z.get() + size_t(t) * L.vd;
      p.b = dc.b.get() + size_t(t) * sh.hv, p.a = dc.a.get() + size_t(t) * sh.hv;
      p.conv_w = w.conv_w.get(), p.conv_ring = step_ring.get(), p.S = step_S.get();
      p.A_log = w.A_log.get(), p.dt_bias = w.dt_bias.get(), p.norm = w.norm.get();
      p.pos = dpos.get() + t, p.hk = sh.hk, p.hv = sh.hv, p.dk = sh.dk, p.dv = sh.dv, p.K = kK;
      p.out = step_out.get() + size_t(t) * L.vd;
      // The step reads its state before its grid-dependency wait (other kernels separate two
      // steps of a layer in decode), so back-to-back steps are waited for one by one.
      ASSERT_TRUE(cuda::launch_gdn_step(p, nullptr).ok());
      ORCHID_CUDA_OK(cudaDeviceSynchronize());
    }

    EXPECT_DIFF(S.host(), step_S.host(), kScanBound, kScanElemBound, at << " S");
    EXPECT_TRUE(same_bits(ring.host(), step_ring.host())) << at << " ring";
    const auto out = dc.out.host();
    const auto want = step_out.host();
    int bad = 0;
    for (size_t e = 0; e < out.size(); ++e)
      if (!out_ok(f16_to_f32(out[e]), want[e], L.norm[e % size_t(sh.dv)], c.z[e]) && bad++ < 5)
        ADD_FAILURE() << at << " out " << e << ": " << f16_to_f32(out[e]) << " vs " << want[e];
  }
}

// ---- Two chunks (T1, T − T1) equal one chunk bit for bit: every token's arithmetic is the same
// whether its taps come from the ring or the chunk and its state from registers or memory. ----
TEST(CudaDeltaNetPrefill, TwoChunksEqualOne) {
  ORCHID_REQUIRE_GPU();
  std::mt19937_64 rng(std::random_device{}());
  const int pos0 = 3, T = 100;
  for (Shape sh : {kReal, kOdd[1]}) {
    const Layer L = random_layer(sh, rng);
    const DevLayer w(L);
    const History start = random_history(L, pos0, rng);
    const Chunk c = random_chunk(L, T, rng);
    DevChunk one(L, c);
    DevBuf<float> ring(ring_of(L, start)), S(state_of(start));
    ASSERT_TRUE(cuda::launch_gdn_prefill(params(L, w, one, ring, S, pos0, 0, T), nullptr).ok());
    ORCHID_CUDA_OK(cudaDeviceSynchronize());
    for (int T1 : {1, 2, 33, 64, 99}) {
      const std::string at = where(sh, pos0, T) + " split at " + std::to_string(T1);
      DevChunk two(L, c);
      DevBuf<float> ring2(ring_of(L, start)), S2(state_of(start));
      ASSERT_TRUE(
          cuda::launch_gdn_prefill(params(L, w, two, ring2, S2, pos0, 0, T1), nullptr).ok());
      ASSERT_TRUE(
          cuda::launch_gdn_prefill(params(L, w, two, ring2, S2, pos0 + T1, T1, T - T1), nullptr)
              .ok());
      ORCHID_CUDA_OK(cudaDeviceSynchronize());
      EXPECT_TRUE(same_bits(two.conv_out.host(), one.conv_out.host())) << at << " conv_out";
      EXPECT_TRUE(same_bits(two.beta.host(), one.beta.host())) << at << " beta";
      EXPECT_TRUE(same_bits(two.decay.host(), one.decay.host())) << at << " decay";
      EXPECT_TRUE(same_bits(two.o.host(), one.o.host())) << at << " o";
      EXPECT_TRUE(two.out.host() == one.out.host()) << at << " out";
      EXPECT_TRUE(same_bits(S2.host(), S.host())) << at << " S";
      EXPECT_TRUE(same_bits(ring2.host(), ring.host())) << at << " ring";
    }
  }
}

// ---- Parameters the kernels cannot take are refused before any launch (no GPU needed). ----
TEST(CudaDeltaNetPrefill, RejectsBadParams) {
  float f = 0;
  uint16_t h = 0;
  cuda::GdnPrefillParams ok;
  ok.qkv = ok.z = ok.b = ok.a = ok.conv_w = ok.A_log = ok.dt_bias = ok.norm = &f;
  ok.conv_ring = ok.S = ok.conv_out = ok.beta = ok.decay = ok.o = &f;
  ok.out = &h;
  ok.hk = 2, ok.hv = 4, ok.dk = 64, ok.dv = 64, ok.K = 4, ok.T = 8;
  auto refused = [](cuda::GdnPrefillParams p) {
    return !cuda::launch_gdn_prefill(p, nullptr).ok();
  };
  cuda::GdnPrefillParams p = ok;
  p.dk = 129;
  EXPECT_TRUE(refused(p)) << "dk 129";
  p = ok, p.dv = 0;
  EXPECT_TRUE(refused(p)) << "dv 0";
  p = ok, p.hv = 5;
  EXPECT_TRUE(refused(p)) << "hv 5 over hk 2";
  p = ok, p.K = 9;
  EXPECT_TRUE(refused(p)) << "K 9";
  p = ok, p.T = 0;
  EXPECT_TRUE(refused(p)) << "T 0";
  p = ok, p.pos0 = -1;
  EXPECT_TRUE(refused(p)) << "pos0 -1";
  p = ok, p.S = nullptr;
  EXPECT_TRUE(refused(p)) << "no state";
  p = ok, p.form = cuda::GdnScanForm::chunked;
  EXPECT_TRUE(refused(p)) << "chunked without scratch";
}

}  // namespace
}  // namespace orchid

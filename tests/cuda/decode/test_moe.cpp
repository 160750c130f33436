// MoE experts with MLX 4-bit weights (group 64), routed from random logits (in the gate/up
// prologue, or by the routing kernel of its own), against a double-precision reference on fresh
// random inputs.
// Bounds (ε = 1e-4, against fp32 sums of exact products ~1e-7 · Σ|terms|): gate g and up u each
// within ε · Σ|w·x̂|,
// so act = silu(g) · u within ε · (1.1 |u| Σ|gate·x̂| + |silu(g)| Σ|up·x̂|) + 1e-7; residual
// rows within ε · Σ|weighted terms| + 1e-6. The dp4a kernels (2,048-wide experts; down only
// after a dp4a gate/up, on rows of 512) add their worst case (cuda_test_matrix.h dp4a_bound):
// g and u by Σ|scale · code| · gmax / 64,516, each residual term by
// w_s · (|down| · the act's own allowance + |scale · code| · its quantisation step).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "../cuda_test_matrix.h"
#include "../cuda_test_reference.h"
#include "../cuda_test_util.h"

namespace orchid {
namespace {

using cuda::DevFormat;
using test::DevBuf;
using test::DeviceMatrix;
using test::HostMatrix;

double silu(double x) {
  return x / (1 + std::exp(-x));
}

struct Case {
  int E, k, ff, H;
};

// (shape, routing in a kernel of its own instead of the gate/up prologue, dp4a kernels, epilogues
// in kernels of their own)
class MoeQ4 : public ::testing::TestWithParam<std::tuple<Case, bool, bool, bool>> {};

TEST_P(MoeQ4, RoutedGateUpAndDownMatchReference) {
  ORCHID_REQUIRE_GPU();
  const auto [cs, separate_routing, dp4a, unfused] = GetParam();
  test::PathMode mode({dp4a});
  const bool gate_up_dp4a = dp4a && cs.H == 2048, down_dp4a = gate_up_dp4a && cs.ff == 512;
  std::mt19937_64 rng(std::random_device{}());
  const int S = cs.k + 1;  // routed slots + the shared expert (stacked as expert E)
  HostMatrix gate(DevFormat::q4, (cs.E + 1) * cs.ff, cs.H, rng),
      up(DevFormat::q4, (cs.E + 1) * cs.ff, cs.H, rng),
      down(DevFormat::q4, (cs.E + 1) * cs.H, cs.ff, rng);
  DeviceMatrix dgate(gate), dup(up), ddown(down);
  auto x = test::random_floats(size_t(cs.H), -2.f, 2.f, rng);
  auto norm = test::random_floats(size_t(cs.H), 0.5f, 1.5f, rng);
  auto logits = test::random_floats(size_t(cs.E + 1), -3.f, 3.f, rng);
  const int act_stride = (cs.ff + 31) / 32 * 32;
  DevBuf<float> dx(x), dn(norm), dl(logits), dsw(static_cast<size_t>(S)),
      dact(std::vector<float>(size_t(S) * act_stride, 0.f)), dh(x);
  DevBuf<int> dsel(static_cast<size_t>(S));
  DevBuf<float> draw(size_t(S) * 2 * act_stride), dslot(size_t(S) * cs.H);
  cuda::MoeParams p;
  p.gate = dgate.m, p.up = dup.m, p.down = ddown.m;
  p.n_ff = cs.ff, p.n_embd = cs.H, p.n_slot = S, p.x = dx.get(), p.norm = dn.get();
  p.logits = dl.get(), p.n_expert = cs.E, p.top_k = cs.k;
  p.sel = dsel.get(), p.sel_w = dsw.get(), p.act = dact.get(), p.h = dh.get();
  if (separate_routing) {
    ASSERT_TRUE(cuda::launch_moe_route(p, nullptr).ok());
    p.logits = nullptr;  // the expert launches read sel / sel_w
  }
  if (unfused) p.gate_up_raw = draw.get(), p.slot_out = dslot.get();
  ASSERT_TRUE(cuda::launch_moe_gate_up(p, nullptr).ok());
  if (unfused) {
    ASSERT_TRUE(cuda::launch_moe_silu_mul(p, nullptr).ok());
  }
  ASSERT_TRUE(cuda::launch_moe_down(p, nullptr).ok());
  if (unfused) {
    ASSERT_TRUE(cuda::launch_moe_weighted_residual(p, nullptr).ok());
  }
  ORCHID_CUDA_OK(cudaDeviceSynchronize());

  const test::Routing want_routing = test::reference_routing(logits, cs.E, cs.k);
  const std::vector<int>& sel = want_routing.sel;
  const std::vector<double>& sw = want_routing.w;
  EXPECT_EQ(dsel.host(), sel);
  const std::vector<double> xh = test::x_hat(x, &norm, 1e-6f);
  const std::vector<double> gmax = test::group_max_abs(xh, 64);
  std::vector<double> act(size_t(S) * cs.ff), act_tol(size_t(S) * cs.ff);
  auto got_act = dact.host();
  int bad = 0;
  for (int s = 0; s < S; ++s)
    for (int i = 0; i < cs.ff; ++i) {
      double g = 0, u = 0, mag_g = 0, mag_u = 0;
      const size_t row = size_t(sel[size_t(s)]) * cs.ff + i;
      for (int c = 0; c < cs.H; ++c) {
        const double pg = double(gate.w[row * cs.H + c]) * xh[size_t(c)];
        const double pu = double(up.w[row * cs.H + c]) * xh[size_t(c)];
        g += pg, u += pu, mag_g += std::fabs(pg), mag_u += std::fabs(pu);
      }
      const double q_g = gate_up_dp4a ? test::dp4a_bound(gate, int(row), gmax) : 0.0;
      const double q_u = gate_up_dp4a ? test::dp4a_bound(up, int(row), gmax) : 0.0;
      const double want = act[size_t(s) * cs.ff + i] = silu(g) * u;
      const double got = got_act[size_t(s) * act_stride + i];
      const double tol = (1e-4 * mag_g + q_g) * 1.1 * std::fabs(u) +
                         (1e-4 * mag_u + q_u) * std::fabs(silu(g)) + 1e-7;
      act_tol[size_t(s) * cs.ff + i] = tol;
      if (!(std::fabs(got - want) <= tol) && bad++ < 5)
        ADD_FAILURE() << "act slot " << s << " row " << i << ": " << got << " vs " << want;
    }
  // The act rows' group maxima (of the device's act, which the down kernel quantises).
  std::vector<double> act_gmax(act.size());
  for (int s = 0; s < S; ++s) {
    std::vector<double> a(got_act.begin() + s * act_stride,
                          got_act.begin() + s * act_stride + cs.ff);
    const std::vector<double> g = test::group_max_abs(a, 64);
    std::copy(g.begin(), g.end(), act_gmax.begin() + s * cs.ff);
  }
  auto h = dh.host();
  for (int r = 0; r < cs.H; ++r) {
    double want = x[size_t(r)], mag = std::fabs(want), extra = 0;
    for (int s = 0; s < S; ++s) {
      const size_t row = size_t(sel[size_t(s)]) * cs.H + r;
      for (int i = 0; i < cs.ff; ++i) {
        const size_t a = size_t(s) * cs.ff + i;
        const double wd = sw[size_t(s)] * double(down.w[row * cs.ff + i]);
        const double term = wd * act[a];
        want += term, mag += std::fabs(term);
        if (gate_up_dp4a) extra += std::fabs(wd) * act_tol[a];
        if (down_dp4a)
          extra += sw[size_t(s)] * test::scaled_code(down, int(row), i) * act_gmax[a] / 64516.0;
      }
    }
    if (!(std::fabs(h[size_t(r)] - want) <= 1e-4 * mag + extra + 1e-6) && bad++ < 10)
      ADD_FAILURE() << "down row " << r << ": " << h[size_t(r)] << " vs " << want;
  }
}

// The real shape (256 experts would only make the weights larger: 16 cover the indexing), 40
// experts (routing over two chunks of 32, the second short), a 1,024-wide one (no dp4a gate/up,
// so no dp4a down either: the down kernel may read the routing early only after a dp4a gate/up),
// and a small one with a single 64-input group per row and an odd expert count.
INSTANTIATE_TEST_SUITE_P(
    Cuda, MoeQ4,
    ::testing::Combine(::testing::Values(Case{16, 8, 512, 2048}, Case{40, 8, 512, 2048},
                                         Case{16, 8, 512, 1024}, Case{5, 3, 64, 128}),
                       ::testing::Bool(), ::testing::Bool(), ::testing::Bool()));

// A batch (grid y = slot, every buffer of slot b at b · stride) gives each slot the bytes it gets
// alone: act and the residual, with the expert down streamed through shared memory (the
// default) and with its rows in registers (ORCHID_STAGED_DOWN=0). The real shape, 2 / 5 / 8
// slots, fresh random weights, inputs and routing.
class MoeQ4Batch : public ::testing::TestWithParam<std::tuple<int, bool>> {};

TEST_P(MoeQ4Batch, EachSlotGetsItsBytesAlone) {
  ORCHID_REQUIRE_GPU();
  const auto [B, staged] = GetParam();
  test::PathMode mode({true});
  const bool saved_staged = cuda::staged_down_enabled();
  cuda::set_staged_down_enabled(staged);
  const Case cs{16, 8, 512, 2048};
  std::mt19937_64 rng(std::random_device{}());
  const int S = cs.k + 1, act_stride = (cs.ff + 31) / 32 * 32;
  HostMatrix gate(DevFormat::q4, (cs.E + 1) * cs.ff, cs.H, rng),
      up(DevFormat::q4, (cs.E + 1) * cs.ff, cs.H, rng),
      down(DevFormat::q4, (cs.E + 1) * cs.H, cs.ff, rng);
  DeviceMatrix dgate(gate), dup(up), ddown(down);
  // A slot's region: x, logits, sel, sel_w, act, h (floats; sel's ints in float-sized words),
  // each 256-byte aligned as the engine's arena aligns them (the kernels load vector words).
  auto next = [](int64_t at, int64_t n) { return (at + n + 63) / 64 * 64; };
  const int64_t o_x = 0, o_l = next(o_x, cs.H), o_sel = next(o_l, cs.E + 1), o_sw = next(o_sel, S),
                o_act = next(o_sw, S), o_h = next(o_act, int64_t(S) * act_stride),
                stride = next(o_h, cs.H);
  std::vector<float> init(size_t(B * stride), 0.f);
  for (int b = 0; b < B; ++b) {
    float* r = init.data() + b * stride;
    auto x = test::random_floats(size_t(cs.H), -2.f, 2.f, rng);
    auto l = test::random_floats(size_t(cs.E + 1), -3.f, 3.f, rng);
    std::copy(x.begin(), x.end(), r + o_x);
    std::copy(l.begin(), l.end(), r + o_l);
    std::copy(x.begin(), x.end(), r + o_h);
  }
  auto norm = test::random_floats(size_t(cs.H), 0.5f, 1.5f, rng);
  DevBuf<float> dn(norm);
  auto run = [&](float* base, int slots) {
    cuda::MoeParams p;
    p.gate = dgate.m, p.up = dup.m, p.down = ddown.m;
    p.n_ff = cs.ff, p.n_embd = cs.H, p.n_slot = S, p.norm = dn.get();
    p.n_expert = cs.E, p.top_k = cs.k;
    p.x = base + o_x, p.logits = base + o_l, p.sel = reinterpret_cast<int*>(base + o_sel);
    p.sel_w = base + o_sw, p.act = base + o_act, p.h = base + o_h;
    p.batch.slots = slots, p.batch.stride = stride;
    ASSERT_TRUE(cuda::launch_moe_gate_up(p, nullptr).ok());
    ASSERT_TRUE(cuda::launch_moe_down(p, nullptr).ok());
    ORCHID_CUDA_OK(cudaDeviceSynchronize());
  };
  DevBuf<float> batched(init), alone(init);
  run(batched.get(), B);
  for (int b = 0; b < B; ++b) run(alone.get() + b * stride, 1);
  cuda::set_staged_down_enabled(saved_staged);
  const std::vector<float> got = batched.host(), want = alone.host();
  for (int b = 0; b < B; ++b) {
    for (int i = 0; i < S * act_stride; ++i)
      ASSERT_EQ(std::memcmp(&got[size_t(b * stride + o_act + i)], &want[size_t(b * stride + o_act + i)], 4), 0)
          << "slot " << b << " act " << i;
    for (int r = 0; r < cs.H; ++r)
      ASSERT_EQ(std::memcmp(&got[size_t(b * stride + o_h + r)], &want[size_t(b * stride + o_h + r)], 4), 0)
          << "slot " << b << " residual row " << r << ": " << got[size_t(b * stride + o_h + r)]
          << " vs " << want[size_t(b * stride + o_h + r)];
  }
}

INSTANTIATE_TEST_SUITE_P(Cuda, MoeQ4Batch,
                         ::testing::Combine(::testing::Values(2, 5, 8), ::testing::Bool()));

}  // namespace
}  // namespace orchid

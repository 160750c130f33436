// GEMV kernels against a double-precision reference on fresh random inputs: q4 / q8 / bf16,
// real and odd widths, several tasks per launch, RMSNorm prologue, residual add, the router
// epilogue (softmax, top-k, renormalise, shared gate) and the lm_head argmax epilogue.
// Bound: |got − ref| ≤ 1e-4 · Σ|w·x| + 1e-6 per output. CUDA cores: fp32 sums of exact products.
// Tensor cores (q4): x̂ rounded to fp16 (relative ≤ 2⁻¹¹ per element, independent), so the
// expected error is ~1.4e-4 · √Σ(w·x)², below 2e-5 · Σ|w·x| from 128 columns up.
// dp4a (q4, q8; only where the kernel runs): each x̂ element off by ≤ its group's max|x̂| /
// 64,516, so the bound adds Σ|scale · code_c| · gmax(c) / 64,516 (a worst case).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>

#include "../cuda_test_matrix.h"
#include "../cuda_test_reference.h"
#include "../cuda_test_util.h"
#include "orchid/backend/cuda/common/kernels.h"

namespace orchid {
namespace {

using cuda::DevFormat;
using test::DevBuf;
using test::DeviceMatrix;
using test::HostMatrix;
using test::x_hat;

// Whether launch_gemv gives matrices like h to the dp4a kernel on `path` (its dispatch rule:
// q4 rows of 2,048 or 4,096 columns, q8 rows of 2,048).
bool dp4a_takes(const HostMatrix& h, test::KernelPath path) {
  if (!path.dp4a) return false;
  if (h.fmt == DevFormat::q4) return h.cols == 2048 || h.cols == 4096;
  return h.fmt == DevFormat::q8 && h.cols == 2048;
}

void expect_close(const HostMatrix& h, const std::vector<double>& xh, const std::vector<float>& got,
                  const std::vector<float>* add, bool dp4a, const char* what) {
  const std::vector<double> gmax = test::group_max_abs(xh, 64);
  int bad = 0;
  for (int r = 0; r < h.rows; ++r) {
    double ref = add ? (*add)[size_t(r)] : 0.0, mag = 0;
    for (int c = 0; c < h.cols; ++c) {
      const double p = double(h.w[size_t(r) * h.cols + c]) * xh[size_t(c)];
      ref += p;
      mag += std::fabs(p);
    }
    const double tol = 1e-4 * mag + 1e-6 + (add ? 1e-6 * std::fabs((*add)[size_t(r)]) : 0.0) +
                       (dp4a ? test::dp4a_bound(h, r, gmax) : 0.0);
    if (!(std::fabs(got[size_t(r)] - ref) <= tol) && bad++ < 5)
      ADD_FAILURE() << what << " row " << r << ": got " << got[size_t(r)] << " want " << ref
                    << " (tol " << tol << ")";
  }
}

struct Shape {
  DevFormat fmt;
  int rows, cols;
};

// (shape, kernel path)
class GemvShapes : public ::testing::TestWithParam<std::tuple<Shape, test::KernelPath>> {};

TEST_P(GemvShapes, TwoTasksWithNormAndResidualMatchReference) {
  ORCHID_REQUIRE_GPU();
  const Shape s = std::get<0>(GetParam());
  test::PathMode mode(std::get<1>(GetParam()));
  std::mt19937_64 rng(std::random_device{}());
  for (bool with_norm : {false, true}) {
    HostMatrix a(s.fmt, s.rows, s.cols, rng), b(s.fmt, s.rows / 2 + 1, s.cols, rng);
    DeviceMatrix da(a), db(b);
    auto x = test::random_floats(size_t(s.cols), -2.f, 2.f, rng);
    auto norm = test::random_floats(size_t(s.cols), 0.5f, 1.5f, rng);
    auto add = test::random_floats(size_t(b.rows), -3.f, 3.f, rng);
    DevBuf<float> dx(x), dnorm(norm), dya(size_t(a.rows)), dyb(add);
    cuda::GemvParams p;
    p.task[0] = {da.m, dya.get(), nullptr};
    p.task[1] = {db.m, dyb.get(), dyb.get()};  // in place: y = y + W·x̂
    p.n_task = 2, p.x = dx.get(), p.cols = s.cols, p.norm = with_norm ? dnorm.get() : nullptr;
    ASSERT_TRUE(cuda::launch_gemv(p, nullptr).ok());
    ORCHID_CUDA_OK(cudaDeviceSynchronize());
    const auto xh = x_hat(x, with_norm ? &norm : nullptr, p.eps);
    const bool dp4a = dp4a_takes(a, std::get<1>(GetParam()));
    expect_close(a, xh, dya.host(), nullptr, dp4a, "task 0");
    expect_close(b, xh, dyb.host(), &add, dp4a, "task 1 (+ residual)");
  }
}

// 20000 × 2048 q4: several rounds per block of the tensor-core kernel (and too many rows for the
// upfront kernel); 600 × 4096: 8 segments; 10000 × 2048 and 2500 × 4096: several rows per warp
// in the upfront kernel.
INSTANTIATE_TEST_SUITE_P(
    Cuda, GemvShapes,
    ::testing::Combine(
        ::testing::Values(Shape{DevFormat::q4, 300, 2048}, Shape{DevFormat::q4, 37, 4096},
                          Shape{DevFormat::q4, 20000, 2048}, Shape{DevFormat::q4, 600, 4096},
                          Shape{DevFormat::q4, 10000, 2048}, Shape{DevFormat::q4, 2500, 4096},
                          Shape{DevFormat::q4, 70, 512}, Shape{DevFormat::q4, 5, 128},
                          Shape{DevFormat::q8, 257, 2048}, Shape{DevFormat::q8, 3, 128},
                          Shape{DevFormat::bf16, 33, 288}, Shape{DevFormat::bf16, 9, 2048},
                          Shape{DevFormat::bf16, 5, 4096}, Shape{DevFormat::bf16, 17, 96}),
        ::testing::ValuesIn(test::kAllPaths)));

// One matrix per launch (what the streaming kernel takes): rows that do not fill whole rounds
// of the grid's warps, RMSNorm prologue and residual add.
TEST(CudaGemv, OneLongMatrixWithNormAndResidual) {
  ORCHID_REQUIRE_GPU();
  std::mt19937_64 rng(std::random_device{}());
  HostMatrix a(DevFormat::q4, 40001, 2048, rng);
  DeviceMatrix da(a);
  auto x = test::random_floats(2048, -2.f, 2.f, rng);
  auto norm = test::random_floats(2048, 0.5f, 1.5f, rng);
  auto add = test::random_floats(size_t(a.rows), -3.f, 3.f, rng);
  for (test::KernelPath path : test::kAllPaths) {
    test::PathMode mode(path);
    DevBuf<float> dx(x), dnorm(norm), dy(add);
    cuda::GemvParams p;
    p.task[0] = {da.m, dy.get(), dy.get()};
    p.n_task = 1, p.x = dx.get(), p.cols = 2048, p.norm = dnorm.get();
    ASSERT_TRUE(cuda::launch_gemv(p, nullptr).ok());
    ORCHID_CUDA_OK(cudaDeviceSynchronize());
    expect_close(a, x_hat(x, &norm, p.eps), dy.host(), &add, dp4a_takes(a, path),
                 test::path_name(path).c_str());
  }
}

// Large activations (|x| up to 3000, as outlier channels reach) keep the same relative bound.
TEST(CudaGemv, Q4HandlesLargeActivations) {
  ORCHID_REQUIRE_GPU();
  std::mt19937_64 rng(std::random_device{}());
  HostMatrix a(DevFormat::q4, 64, 2048, rng);
  DeviceMatrix da(a);
  auto x = test::random_floats(2048, -3000.f, 3000.f, rng);
  for (test::KernelPath path : test::kAllPaths) {
    test::PathMode mode(path);
    DevBuf<float> dx(x), dy(size_t(a.rows));
    cuda::GemvParams p;
    p.task[0] = {da.m, dy.get(), nullptr};
    p.n_task = 1, p.x = dx.get(), p.cols = 2048;
    ASSERT_TRUE(cuda::launch_gemv(p, nullptr).ok());
    ORCHID_CUDA_OK(cudaDeviceSynchronize());
    expect_close(a, x_hat(x, nullptr, p.eps), dy.host(), nullptr, dp4a_takes(a, path),
                 test::path_name(path).c_str());
  }
}

TEST(CudaGemv, ArgmaxPicksTheLargestLogitAndAdvances) {
  ORCHID_REQUIRE_GPU();
  std::mt19937_64 rng(std::random_device{}());
  HostMatrix h(DevFormat::q4, 50021, 2048, rng);
  DeviceMatrix d(h);
  auto x = test::random_floats(2048, -2.f, 2.f, rng);
  DevBuf<float> dx(x), logits(size_t(h.rows)), partial(2 * 4096);
  DevBuf<unsigned> ticket(std::vector<unsigned>{0u});
  DevBuf<int> token(1), pos(std::vector<int>{41}), stopped(std::vector<int>{0});
  cuda::GemvParams p;
  p.task[0] = {d.m, logits.get(), nullptr};
  p.n_task = 1, p.x = dx.get(), p.cols = 2048, p.epilogue = cuda::GemvEpilogue::argmax;
  p.ticket = ticket.get(), p.partial = partial.get(), p.token = token.get(), p.pos = pos.get();
  p.stopped = stopped.get();
  // The id also goes to a mapped host slot per position parity (the decode loop reads it there).
  int* slots = nullptr;
  ORCHID_CUDA_OK(
      cudaHostAlloc(reinterpret_cast<void**>(&slots), 2 * sizeof(int), cudaHostAllocMapped));
  ORCHID_CUDA_OK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&p.host_token), slots, 0));
  // Twice per kernel path: the ticket must have been reset.
  for (int round = 0; round < 2 * int(std::size(test::kAllPaths)); ++round) {
    test::PathMode mode(test::kAllPaths[round / 2]);
    ASSERT_TRUE(cuda::launch_gemv(p, nullptr).ok());
    ORCHID_CUDA_OK(cudaDeviceSynchronize());
    auto l = logits.host();
    const int want = int(std::max_element(l.begin(), l.end()) - l.begin());
    EXPECT_EQ(token.host()[0], want);
    EXPECT_EQ(static_cast<volatile int*>(slots)[(41 + round) & 1], want) << "host slot";
    EXPECT_EQ(pos.host()[0], 42 + round) << test::path_name(test::kAllPaths[round / 2]);
    EXPECT_EQ(ticket.host()[0], 0u);
  }
  cudaFreeHost(slots);
  EXPECT_EQ(stopped.host()[0], 0);
}

// A halted step's lm_head launch does nothing on every path: no logits, no id, no advance, the
// ticket left at zero. 50,021 rows: the bulk stream has requested all its first stages before it
// reads the flag, and must keep its shared memory until they land.
TEST(CudaGemv, HaltedArgmaxLeavesEverythingAsItWas) {
  ORCHID_REQUIRE_GPU();
  std::mt19937_64 rng(std::random_device{}());
  HostMatrix h(DevFormat::q4, 50021, 2048, rng);
  DeviceMatrix d(h);
  auto x = test::random_floats(2048, -2.f, 2.f, rng);
  const std::vector<float> before(size_t(h.rows), 123.f);
  DevBuf<float> dx(x), logits(before), partial(2 * 4096);
  DevBuf<unsigned> ticket(std::vector<unsigned>{0u});
  DevBuf<int> token(std::vector<int>{-5}), pos(std::vector<int>{41}), halt(std::vector<int>{1});
  cuda::GemvParams p;
  p.task[0] = {d.m, logits.get(), nullptr};
  p.n_task = 1, p.x = dx.get(), p.cols = 2048, p.epilogue = cuda::GemvEpilogue::argmax;
  p.ticket = ticket.get(), p.partial = partial.get(), p.token = token.get(), p.pos = pos.get();
  p.halt = halt.get();
  for (test::KernelPath path : test::kAllPaths) {
    test::PathMode mode(path);
    ASSERT_TRUE(cuda::launch_gemv(p, nullptr).ok());
    ORCHID_CUDA_OK(cudaDeviceSynchronize());
    EXPECT_EQ(logits.host(), before) << test::path_name(path);
    EXPECT_EQ(token.host()[0], -5) << test::path_name(path);
    EXPECT_EQ(pos.host()[0], 41) << test::path_name(path);
    EXPECT_EQ(ticket.host()[0], 0u) << test::path_name(path);
  }
}

// The bulk-copy stream is what a compute capability 9.0 device runs for the lm_head (this build
// always holds sm_90a code), so its test path is not the register stream's under another name.
TEST(CudaGemv, BulkStreamRunsOnHopper) {
  ORCHID_REQUIRE_GPU();
  cudaDeviceProp prop{};
  ORCHID_CUDA_OK(cudaGetDeviceProperties(&prop, 0));
  if (prop.major != 9 || prop.minor != 0) GTEST_SKIP() << "not a compute capability 9.0 device";
  EXPECT_TRUE(cuda::bulk_gemv_supported());
}

// The router GEMV (router + shared-expert gate → E + 1 logits), then the expert gate/up launch
// routing from them: top-k (ties to the lower id) renormalised, plus the shared slot.
// A batched launch (2…8 slots, x̂ staged in every block or quantised once into x_codes) gives
// each slot the bytes its batch-1 launch gives it: the batched decode's bit identity (issue 32)
// rests on this. Shapes: the DeltaNet in-projection's four tasks, the 4,096-wide out-projection
// with its residual, the q8 router with the shared-expert gate.
TEST(CudaGemv, BatchedSlotsEqualEachSlotAlone) {
  ORCHID_REQUIRE_GPU();
  std::mt19937_64 rng(std::random_device{}());
  struct Case {
    DevFormat fmt;
    int cols;
    std::vector<int> rows;
    bool norm, add;
  };
  const Case cases[] = {{DevFormat::q4, 2048, {1000, 513, 32, 32}, true, false},
                        {DevFormat::q4, 4096, {2048}, false, true},
                        {DevFormat::q8, 2048, {256, 1}, true, false}};
  constexpr int64_t kStride = 8192;
  for (const Case& c : cases) {
    std::vector<HostMatrix> hm;
    for (int r : c.rows) hm.emplace_back(c.fmt, r, c.cols, rng);
    std::vector<std::unique_ptr<DeviceMatrix>> dm;
    for (const HostMatrix& h : hm) dm.push_back(std::make_unique<DeviceMatrix>(h));
    const int n_task = int(c.rows.size());
    auto x = test::random_floats(size_t(cuda::kMaxSlots) * kStride, -2.f, 2.f, rng);
    auto norm = test::random_floats(size_t(c.cols), 0.5f, 1.5f, rng);
    auto add = test::random_floats(size_t(cuda::kMaxSlots) * kStride, -3.f, 3.f, rng);
    DevBuf<float> dx(x), dnorm(norm), codes{size_t(cuda::kMaxSlots) * kStride}, y1{size_t(kStride)};
    std::vector<std::unique_ptr<DevBuf<float>>> dy;
    for (int t = 0; t < n_task; ++t)
      dy.push_back(c.add ? std::make_unique<DevBuf<float>>(add)
                         : std::make_unique<DevBuf<float>>(size_t(cuda::kMaxSlots) * kStride));
    auto params = [&](int slots) {
      cuda::GemvParams p;
      for (int t = 0; t < n_task; ++t)
        p.task[t] = {dm[size_t(t)]->m, dy[size_t(t)]->get(), c.add ? dy[size_t(t)]->get() : nullptr};
      p.n_task = n_task, p.x = dx.get(), p.cols = c.cols, p.norm = c.norm ? dnorm.get() : nullptr;
      p.batch.slots = slots, p.batch.stride = kStride;
      return p;
    };
    for (int slots : {2, 5, 8})
      for (bool once : {false, true}) {
        // Reset the outputs (in place: y = add + W·x̂).
        for (auto& y : dy)
          ORCHID_CUDA_OK(cudaMemcpy(y->get(), add.data(), add.size() * 4, cudaMemcpyHostToDevice));
        cuda::GemvParams p = params(slots);
        if (once) p.x_codes = codes.get();
        ASSERT_TRUE(cuda::launch_gemv(p, nullptr).ok());
        ORCHID_CUDA_OK(cudaDeviceSynchronize());
        for (int t = 0; t < n_task; ++t) {
          const std::vector<float> got = dy[size_t(t)]->host();
          for (int b = 0; b < slots; ++b) {
            ORCHID_CUDA_OK(cudaMemcpy(y1.get(), add.data() + b * kStride, size_t(kStride) * 4,
                                      cudaMemcpyHostToDevice));
            cuda::GemvParams one = params(1);
            one.batch = {};
            one.n_task = 1;
            one.task[0] = {dm[size_t(t)]->m, y1.get(), c.add ? y1.get() : nullptr};
            one.x = dx.get() + b * kStride;
            // The batch-1 launch of the task alone runs the kernel the group's launch runs
            // (its rows differ; a row's sum does not depend on the rows beside it).
            ASSERT_TRUE(cuda::launch_gemv(one, nullptr).ok());
            ORCHID_CUDA_OK(cudaDeviceSynchronize());
            const std::vector<float> alone = y1.host();
            int bad = 0;
            for (int r = 0; r < c.rows[size_t(t)]; ++r)
              if (std::memcmp(&alone[size_t(r)], &got[size_t(b * kStride + r)], 4) != 0 &&
                  bad++ < 3)
                ADD_FAILURE() << "cols " << c.cols << " task " << t << " slots " << slots
                              << (once ? " (codes once)" : "") << " slot " << b << " row " << r
                              << ": " << got[size_t(b * kStride + r)] << " batched, "
                              << alone[size_t(r)] << " alone";
          }
        }
      }
  }
}

// The batched lm_head (8 and 3 slots, greedy and sampled, one slot halted) picks for each slot
// the id its batch-1 launch picks, and moves each slot's token, position and host pair as that
// does — on the tensor-core kernel (decode/lm_head_slots.cu) and, switched off, on the bulk
// stream's batched dp4a form. 50,021 rows: the last chunk is partial.
TEST(CudaGemv, BatchedArgmaxPicksEachSlotsAloneId) {
  ORCHID_REQUIRE_GPU();
  if (!cuda::bulk_batched_supported()) GTEST_SKIP() << "no batched bulk stream on this device";
  cudaDeviceProp prop{};
  ORCHID_CUDA_OK(cudaGetDeviceProperties(&prop, 0));
  if (prop.major == 9 && prop.minor == 0) {
    EXPECT_TRUE(cuda::lm_head_slots_supported());
  }
  std::mt19937_64 rng(std::random_device{}());
  HostMatrix h(DevFormat::q4, 50021, 2048, rng);
  DeviceMatrix d(h);
  constexpr int kSlots = cuda::kMaxSlots;
  constexpr int64_t kStride = 8192;
  auto x = test::random_floats(size_t(kSlots) * kStride, -2.f, 2.f, rng);
  auto norm = test::random_floats(2048, 0.5f, 1.5f, rng);
  std::vector<float> inv_temp(kSlots);
  std::vector<uint64_t> seed(kSlots);
  for (int b = 0; b < kSlots; ++b)
    inv_temp[size_t(b)] = b % 3 == 0 ? 0.f : 1.f / (0.5f + 0.25f * float(b)), seed[size_t(b)] = rng();
  DevBuf<float> dx(x), dnorm(norm), codes{size_t(kSlots) * kStride}, partial(2 * 4096);
  DevBuf<float> d_inv(inv_temp);
  DevBuf<uint64_t> d_seed(seed);
  DevBuf<int> stop_ids(std::vector<int>(size_t(kSlots) * cuda::kMaxStopIds, -1));
  DevBuf<unsigned> ticket(std::vector<unsigned>{0u});
  int* host = nullptr;
  ORCHID_CUDA_OK(cudaHostAlloc(reinterpret_cast<void**>(&host), 2 * kSlots * sizeof(int),
                               cudaHostAllocMapped));
  int* host_dev = nullptr;
  ORCHID_CUDA_OK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&host_dev), host, 0));
  for (bool mma : {true, false})
    for (int slots : {8, 7}) {
      cuda::set_slot_mma_enabled(mma);
      std::vector<int> pos0(size_t(kSlots) * kStride, 0), halt0(pos0.size(), 0), token0(pos0.size(), -7);
      for (int b = 0; b < slots; ++b) pos0[size_t(b * kStride)] = 100 + 17 * b + (mma ? 0 : 1);
      halt0[size_t(1 * kStride)] = 1;
      DevBuf<int> pos(pos0), halt(halt0), token(token0);
      cuda::GemvParams p;
      p.task[0] = {d.m, nullptr, nullptr};
      p.n_task = 1, p.x = dx.get(), p.cols = 2048, p.norm = dnorm.get();
      p.epilogue = cuda::GemvEpilogue::argmax, p.ticket = ticket.get(), p.partial = partial.get();
      p.token = token.get(), p.pos = pos.get(), p.stopped = halt.get(), p.halt = halt.get();
      p.stop_ids = stop_ids.get(), p.host_token = host_dev;
      p.batch.slots = slots, p.batch.stride = kStride;
      p.slot_inv_temp = d_inv.get(), p.slot_seed = d_seed.get(), p.x_codes = codes.get();
      ASSERT_TRUE(cuda::launch_gemv(p, nullptr).ok());
      ORCHID_CUDA_OK(cudaDeviceSynchronize());
      const std::vector<int> got_tok = token.host(), got_pos = pos.host();
      EXPECT_EQ(ticket.host()[0], 0u);
      for (int b = 0; b < slots; ++b) {
        const size_t at = size_t(b * kStride);
        if (b == 1) {
          EXPECT_EQ(got_tok[at], -7) << "halted slot";
          EXPECT_EQ(got_pos[at], pos0[at]) << "halted slot";
          continue;
        }
        DevBuf<int> tok1(std::vector<int>{-1}), pos1(std::vector<int>{pos0[at]});
        cuda::GemvParams one;
        one.task[0] = {d.m, nullptr, nullptr};
        one.n_task = 1, one.x = dx.get() + b * kStride, one.cols = 2048, one.norm = dnorm.get();
        one.epilogue = cuda::GemvEpilogue::argmax, one.ticket = ticket.get();
        one.partial = partial.get(), one.token = tok1.get(), one.pos = pos1.get();
        one.inv_temp = inv_temp[size_t(b)], one.seed = seed[size_t(b)];
        ASSERT_TRUE(cuda::launch_gemv(one, nullptr).ok());
        ORCHID_CUDA_OK(cudaDeviceSynchronize());
        const int want = tok1.host()[0];
        EXPECT_EQ(got_tok[at], want) << (mma ? "tensor cores" : "dp4a") << ", " << slots
                                     << " slots, slot " << b << " (1/T " << inv_temp[size_t(b)] << ")";
        EXPECT_EQ(got_pos[at], pos0[at] + 1);
        EXPECT_EQ(static_cast<volatile int*>(host)[2 * b + (pos0[at] & 1)], want) << "host pair";
      }
    }
  cuda::set_slot_mma_enabled(true);
  cudaFreeHost(host);
}

TEST(CudaRouting, GateUpPicksTopKRenormalisesAndAddsTheSharedSlot) {
  ORCHID_REQUIRE_GPU();
  std::mt19937_64 rng(std::random_device{}());
  for (auto [E, k] : {std::pair{256, 8}, std::pair{5, 3}}) {
    const int H = 2048, ff = 32;
    HostMatrix r(DevFormat::q8, E, H, rng), g(DevFormat::q8, 1, H, rng);
    HostMatrix gate(DevFormat::bf16, (E + 1) * ff, H, rng),
        up(DevFormat::bf16, (E + 1) * ff, H, rng);
    DeviceMatrix dr(r), dg(g), dgate(gate), dup(up);
    // Small inputs keep the logits O(1), so no two probabilities underflow into a tie.
    auto x = test::random_floats(size_t(H), -0.05f, 0.05f, rng);
    DevBuf<float> dx(x), logits(size_t(E + 1)), sel_w(size_t(k + 1)), act(size_t(k + 1) * ff);
    DevBuf<int> sel(size_t(k + 1));
    cuda::GemvParams p;
    p.task[0] = {dr.m, logits.get(), nullptr};
    p.task[1] = {dg.m, logits.get() + E, nullptr};
    p.n_task = 2, p.x = dx.get(), p.cols = H;
    ASSERT_TRUE(cuda::launch_gemv(p, nullptr).ok());
    cuda::MoeParams m;
    m.gate = dgate.m, m.up = dup.m, m.n_ff = ff, m.n_embd = H, m.n_slot = k + 1;
    m.x = dx.get(), m.logits = logits.get(), m.n_expert = E, m.top_k = k;
    m.sel = sel.get(), m.sel_w = sel_w.get(), m.act = act.get();
    ASSERT_TRUE(cuda::launch_moe_gate_up(m, nullptr).ok());
    ORCHID_CUDA_OK(cudaDeviceSynchronize());
    const test::Routing want = test::reference_routing(logits.host(), E, k);
    auto s = sel.host();
    auto w = sel_w.host();
    for (int i = 0; i < k; ++i) {
      EXPECT_EQ(s[size_t(i)], want.sel[size_t(i)]) << "slot " << i;
      EXPECT_NEAR(w[size_t(i)], want.w[size_t(i)], 1e-5);
    }
    EXPECT_EQ(s[size_t(k)], E);
    EXPECT_NEAR(w[size_t(k)], want.w[size_t(k)], 1e-6);
  }
}

// Ties between router logits go to the lower expert id, and -0 ties with +0, as on the CPU:
// 64 experts all at 0 but one at 1 and one at -0.
TEST(CudaRouting, TiesGoToTheLowerIdAndMinusZeroTiesWithZero) {
  ORCHID_REQUIRE_GPU();
  const int E = 64, k = 8;
  std::vector<float> logits(size_t(E + 1), 0.f);
  logits[40] = 1.f, logits[5] = -0.f, logits[E] = 0.5f;
  DevBuf<float> dl(logits), sel_w(size_t(k + 1));
  DevBuf<int> sel(size_t(k + 1));
  cuda::MoeParams m;
  m.n_slot = k + 1, m.logits = dl.get(), m.n_expert = E, m.top_k = k;
  m.sel = sel.get(), m.sel_w = sel_w.get();
  ASSERT_TRUE(cuda::launch_moe_route(m, nullptr).ok());
  ORCHID_CUDA_OK(cudaDeviceSynchronize());
  EXPECT_EQ(sel.host(), (std::vector<int>{40, 0, 1, 2, 3, 4, 5, 6, E}));
  const double e = std::exp(-1.0), top = 1 / (1 + 7 * e);
  auto w = sel_w.host();
  EXPECT_NEAR(w[0], top, 1e-6);
  for (int i = 1; i < k; ++i) EXPECT_NEAR(w[size_t(i)], e * top, 1e-6) << i;
  EXPECT_NEAR(w[size_t(k)], 1 / (1 + std::exp(-0.5)), 1e-6);
}

}  // namespace
}  // namespace orchid

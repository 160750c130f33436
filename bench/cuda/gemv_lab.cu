// GEMV lab: the batch-1 q4 GEMV paths side by side on the model's real shapes, against the
// loads alone (docs/perf-notes.md; the designs tried in session 4 are in
// bench/results/gemv-lab-2026-11-30-s4/). Each variant runs as a CUDA graph of 30 launches over
// 30 distinct weight sets (no L2 reuse) with programmatic dependent launch, as in a decode step;
// results are checked against a double CPU reference.
//   usage: orchid_gemv_lab [out.json]
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "orchid/backend/cuda/decode/dp4a_q4.cuh"

namespace orchid::cuda {
namespace {

constexpr int kThreads = 256, kWarps = kThreads / 32, kSets = 30;

#define LAB_CHECK(x)                                                                          \
  do {                                                                                        \
    cudaError_t e_ = (x);                                                                     \
    if (e_ != cudaSuccess) {                                                                  \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)

// The loads of the upfront kernel alone (memory + launch floor).
template <int NI, int ROWS>
__global__ void __launch_bounds__(kThreads, 2) read_only_kernel(DevMatrix m, unsigned* sink) {
  const SubGroup sg(32);
  const int r0 = (blockIdx.x * kWarps + (threadIdx.x >> 5)) * ROWS;
  RowUnits<NI> w[ROWS];
#pragma unroll
  for (int i = 0; i < ROWS; ++i)
    if (r0 + i < m.rows) load_units<DevFormat::q4, NI>(m, r0 + i, sg.sl, 32, w[i]);
  grid_dep_wait();
  grid_dep_release();
  unsigned v = 0;
#pragma unroll
  for (int i = 0; i < ROWS; ++i)
#pragma unroll
    for (int j = 0; j < NI; ++j)
      v ^= w[i].w[j].x ^ w[i].w[j].y ^ w[i].w[j].z ^ w[i].w[j].w ^ w[i].sb[j];
  if (v == 0x12345678u) sink[0] = v;
}

// The chain's fixed costs: a launch that only waits for the previous one, and one that also
// stages and quantises x̂ as the upfront kernel's prologue does.
__global__ void __launch_bounds__(kThreads, 2) empty_kernel(float* y) {
  grid_dep_wait();
  grid_dep_release();
  if (threadIdx.x == 0 && blockIdx.x == 0) y[0] = 0.f;
}
__global__ void __launch_bounds__(kThreads, 2)
    prologue_kernel(const float* x, const float* norm, int cols, float* y) {
  extern __shared__ float4 smem4[];
  const int units = cols / 32;
  int4* xq = reinterpret_cast<int4*>(smem4);
  float2* xd = reinterpret_cast<float2*>(xq + 4 * units);
  __shared__ float scratch[32];
  grid_dep_wait();
  grid_dep_release();
  stage_x_quant(x, cols, norm, 1e-6f, xq, xd, nullptr, scratch);
  if (threadIdx.x == 0) y[blockIdx.x] = xd[threadIdx.x % units].x;
}

// The batched GEMV's prologue alone: every live slot's x̂ staged and quantised, as
// upfront_gemv_kernel<BATCHED> does it in each block.
__global__ void __launch_bounds__(kThreads, 2)
    prologue_slots_kernel(const float* x, int64_t stride, int slots, const float* norm, int cols,
                          float* y) {
  extern __shared__ float4 smem4[];
  __shared__ float scratch[32 * kMaxSlots];
  grid_dep_wait();
  grid_dep_release();
  stage_x_quant_slots(x, stride, (1u << slots) - 1u, cols, norm, 1e-6f, false,
                      reinterpret_cast<unsigned char*>(smem4), scratch);
  const SlotCodes sc(reinterpret_cast<unsigned char*>(smem4), cols / 32, slots - 1);
  if (threadIdx.x == 0) y[blockIdx.x] = sc.xd[0].x;
}

// The chain as one persistent kernel instead of kSets launches: every block is resident (grid from
// the occupancy API), requests its rows of stage v before it waits, then spins on the count of
// blocks done with stage v − 1 (acquire at gpu scope) instead of a kernel boundary; each block
// adds itself to the count after its stores (release). The question for docs/perf-notes.md: is a
// counter wait cheaper than a PDL boundary? `done` is zeroed before each replay.
__device__ __forceinline__ unsigned load_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

struct ChainParams {
  DevMatrix m[kSets];
  float* y[kSets];
  const float* x;
  const float* norm;
  unsigned* done;
  int rpw;
};

template <int NI, int ROWS>
__global__ void __launch_bounds__(kThreads, 2)
    persistent_chain_kernel(const __grid_constant__ ChainParams p) {
  extern __shared__ float4 smem4[];
  __shared__ float scratch[32];
  const int cols = p.m[0].cols, units = cols / 32;
  int4* xq = reinterpret_cast<int4*>(smem4);
  float2* xd = reinterpret_cast<float2*>(xq + 4 * units);
  const SubGroup sg(32);
  const int r0 = (blockIdx.x * kWarps + int(threadIdx.x >> 5)) * p.rpw;
  for (int v = 0; v < kSets; ++v) {
    const DevMatrix& m = p.m[v];
    RowUnits<NI> w[ROWS] = {};
#pragma unroll
    for (int i = 0; i < ROWS; ++i)
      if (i < p.rpw && r0 + i < m.rows) load_units<DevFormat::q4, NI>(m, r0 + i, sg.sl, 32, w[i]);
    if (threadIdx.x == 0)
      while (load_acquire(p.done) < unsigned(v) * gridDim.x) {
      }
    __syncthreads();
    stage_x_quant(p.x, cols, p.norm, 1e-6f, xq, xd, nullptr, scratch);
    XQuant<NI> q;
    load_x_quant<NI>(xq, xd, units, sg.sl, 32, q);
    float acc[ROWS];
#pragma unroll
    for (int i = 0; i < ROWS; ++i) acc[i] = i < p.rpw ? partial_dot_dp4a<NI>(w[i], q) : 0.f;
    const int i = reduce_rows<ROWS>(acc, sg.sl);
    if ((sg.sl & (32 / ROWS - 1)) == 0 && i < p.rpw && r0 + i < m.rows) p.y[v][r0 + i] = acc[0];
    __syncthreads();  // the block's stores, and its reads of xq / xd, are done
    if (threadIdx.x == 0) {
      __threadfence();
      atomicAdd(p.done, 1u);
    }
  }
}

// ---- host side ---------------------------------------------------------------------------------

struct WeightSet {
  DevMatrix m;
  float* y = nullptr;
};

struct Shape {
  const char* name;
  int rows, cols;
};

float bf16f(uint16_t b) {
  uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// y = W · x̂ in double for weight set 0.
std::vector<double> reference(const DevMatrix& m, const std::vector<float>& x,
                              const std::vector<float>& norm) {
  std::vector<uint32_t> w(size_t(m.rows) * m.units * 4), sb(size_t(m.rows) * (m.cols / 64));
  LAB_CHECK(cudaMemcpy(w.data(), m.w, w.size() * 4, cudaMemcpyDeviceToHost));
  LAB_CHECK(cudaMemcpy(sb.data(), m.sb, sb.size() * 4, cudaMemcpyDeviceToHost));
  double ss = 0;
  for (int c = 0; c < m.cols; ++c) ss += double(x[size_t(c)]) * x[size_t(c)];
  const double inv = 1.0 / std::sqrt(ss / double(m.cols) + 1e-6);
  std::vector<double> xh(size_t(m.cols));
  for (int c = 0; c < m.cols; ++c) xh[size_t(c)] = double(x[size_t(c)]) * inv * norm[size_t(c)];
  std::vector<double> y(size_t(m.rows));
  for (int r = 0; r < m.rows; ++r) {
    double acc = 0;
    for (int c = 0; c < m.cols; ++c) {
      const uint32_t word = w[size_t(r) * m.units * 4 + size_t(c / 8)];
      const double q = double((word >> (4 * (c % 8))) & 15u);
      const uint32_t p = sb[size_t(r) * (m.cols / 64) + size_t(c / 64)];
      acc += (double(bf16f(uint16_t(p & 0xffff))) * q + double(bf16f(uint16_t(p >> 16)))) *
             xh[size_t(c)];
    }
    y[size_t(r)] = acc;
  }
  return y;
}

// Microseconds per replay of what `enqueue` launches on s, captured as one CUDA graph.
double time_chain(cudaStream_t s, const std::function<void()>& enqueue) {
  cudaGraph_t g;
  cudaGraphExec_t ge;
  LAB_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  enqueue();
  LAB_CHECK(cudaStreamEndCapture(s, &g));
  LAB_CHECK(cudaGraphInstantiate(&ge, g, 0));
  LAB_CHECK(cudaGraphLaunch(ge, s));
  cudaEvent_t a, b;
  LAB_CHECK(cudaEventCreate(&a));
  LAB_CHECK(cudaEventCreate(&b));
  constexpr int kReps = 40;
  LAB_CHECK(cudaEventRecord(a, s));
  for (int i = 0; i < kReps; ++i) LAB_CHECK(cudaGraphLaunch(ge, s));
  LAB_CHECK(cudaEventRecord(b, s));
  LAB_CHECK(cudaEventSynchronize(b));
  float ms = 0;
  LAB_CHECK(cudaEventElapsedTime(&ms, a, b));
  LAB_CHECK(cudaGraphExecDestroy(ge));
  LAB_CHECK(cudaGraphDestroy(g));
  return ms * 1e3 / kReps;
}

struct Result {
  std::string shape, variant;
  double us = 0, gbps = 0, rel_err = -1;
};

}  // namespace
}  // namespace orchid::cuda

int main(int argc, char** argv) {
  using namespace orchid::cuda;
  set_pdl_enabled(true);
  cudaStream_t s;
  LAB_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const Shape shapes[] = {{"gdn in 12352x2048", 12352, 2048},
                          {"gate/up-like 9216x2048", 9216, 2048},
                          {"out 2048x4096", 2048, 4096}};
  float *x, *norm;
  unsigned *sink, *counter;
  LAB_CHECK(cudaMalloc(&counter, 4));
  LAB_CHECK(cudaMalloc(&x, 4096 * 4));
  LAB_CHECK(cudaMalloc(&norm, 4096 * 4));
  LAB_CHECK(cudaMalloc(&sink, 1 << 20));
  if (!launch_fill_uniform_f32(x, 4096, -1.f, 1.f, 1, s) ||
      !launch_fill_uniform_f32(norm, 4096, 0.5f, 1.5f, 2, s))
    return 1;
  std::vector<float> hx(4096), hn(4096);
  LAB_CHECK(cudaStreamSynchronize(s));
  LAB_CHECK(cudaMemcpy(hx.data(), x, 4096 * 4, cudaMemcpyDeviceToHost));
  LAB_CHECK(cudaMemcpy(hn.data(), norm, 4096 * 4, cudaMemcpyDeviceToHost));
  std::vector<Result> results;

  for (const Shape& sh : shapes) {
    std::vector<WeightSet> sets(kSets);
    const int units = sh.cols / 32;
    int64_t bytes = int64_t(sh.rows) * units * 16 + int64_t(sh.rows) * (sh.cols / 64) * 4;
    for (int v = 0; v < kSets; ++v) {
      void* w;
      uint32_t* sb;
      LAB_CHECK(cudaMalloc(&w, size_t(sh.rows) * units * 16));
      LAB_CHECK(cudaMalloc(&sb, size_t(sh.rows) * (sh.cols / 64) * 4));
      LAB_CHECK(cudaMalloc(&sets[size_t(v)].y, size_t(sh.rows) * 4));
      if (!launch_fill_random(w, int64_t(sh.rows) * units * 4, 100 + v, s) ||
          !launch_fill_scale_bias(sb, int64_t(sh.rows) * (sh.cols / 64), 0.05f, 4, 200 + v, s))
        return 1;
      DevMatrix& m = sets[size_t(v)].m;
      m.w = w, m.sb = sb, m.rows = sh.rows, m.cols = sh.cols, m.units = units, m.group = 64;
      m.fmt = DevFormat::q4;
    }
    LAB_CHECK(cudaStreamSynchronize(s));
    const std::vector<double> ref = reference(sets[0].m, hx, hn);
    double ref_max = 0;
    for (double v : ref) ref_max = std::max(ref_max, std::fabs(v));

    auto measure = [&](const std::string& name, const std::function<bool(const WeightSet&)>& one,
                       bool check) {
      for (int v = 0; v < kSets; ++v)
        if (!one(sets[size_t(v)])) return;  // warm-up, and the result for the check
      LAB_CHECK(cudaStreamSynchronize(s));
      Result r{sh.name, name};
      if (check) {
        std::vector<float> y(size_t(sh.rows));
        LAB_CHECK(cudaMemcpy(y.data(), sets[0].y, y.size() * 4, cudaMemcpyDeviceToHost));
        double e = 0;
        for (size_t i = 0; i < y.size(); ++i) e = std::max(e, std::fabs(y[i] - ref[i]));
        r.rel_err = e / ref_max;
      }
      r.us = time_chain(s,
                        [&] {
                          for (int v = 0; v < kSets; ++v) one(sets[size_t(v)]);
                        }) /
             kSets;
      r.gbps = double(bytes) / (r.us * 1e3);
      results.push_back(r);
    };

    // The shipped kernels: launch_gemv on each of its q4 paths.
    struct Path {
      const char* name;
      bool dp4a;
    };
    for (const Path& path : {Path{"launch_gemv: upfront, dp4a", true},
                             Path{"launch_gemv: dp4a off (fp32, row batches)", false}}) {
      set_dp4a_enabled(path.dp4a);
      measure(
          path.name,
          [&](const WeightSet& ws) {
            GemvParams p;
            p.task[0].m = ws.m, p.task[0].y = ws.y, p.n_task = 1, p.x = x, p.cols = sh.cols;
            p.norm = norm;
            return bool(launch_gemv(p, s));
          },
          true);
    }
    // The upfront dp4a kernel with its weights in L2 (every launch on set 0).
    set_dp4a_enabled(true);
    measure(
        "upfront dp4a, weights in L2",
        [&](const WeightSet&) {
          GemvParams p;
          p.task[0].m = sets[0].m, p.task[0].y = sets[0].y, p.n_task = 1, p.x = x, p.cols = sh.cols;
          p.norm = norm;
          return bool(launch_gemv(p, s));
        },
        false);
    const int blocks_2sm = 264;
    measure(
        "empty kernels, 264 blocks",
        [&](const WeightSet& ws) {
          return bool(launch("empty", empty_kernel, dim3(blocks_2sm), dim3(kThreads), 0, s, ws.y));
        },
        false);
    for (int blocks : {66, 132, 264, 528})
      measure(
          "prologue only (x̂ quantised from registers), " + std::to_string(blocks) + " blocks",
          [&](const WeightSet& ws) {
            return bool(launch("prologue", prologue_kernel, dim3(blocks), dim3(kThreads),
                               x_quant_smem_bytes(units), s, static_cast<const float*>(x),
                               static_cast<const float*>(norm), sh.cols, ws.y));
          },
          false);
    // The same kSets stages as one persistent kernel (per stage: the µs of the whole chain /
    // kSets).
    auto run_persistent = [&]<int NI, int ROWS>() {
      const auto kernel = persistent_chain_kernel<NI, ROWS>;
      const size_t smem = x_quant_smem_bytes(units);
      const int blocks =
          sm_count() * resident_blocks(reinterpret_cast<const void*>(kernel), kThreads, smem);
      ChainParams cp{};
      for (int v = 0; v < kSets; ++v) cp.m[v] = sets[size_t(v)].m, cp.y[v] = sets[size_t(v)].y;
      cp.x = x, cp.norm = norm, cp.done = counter;
      cp.rpw = (sh.rows + blocks * kWarps - 1) / (blocks * kWarps);
      if (cp.rpw > ROWS) return;
      void* args[] = {&cp};
      auto launch_chain = [&] {
        LAB_CHECK(cudaMemsetAsync(counter, 0, 4, s));
        LAB_CHECK(cudaLaunchKernel(reinterpret_cast<const void*>(kernel), dim3(blocks),
                                   dim3(kThreads), args, smem, s));
      };
      launch_chain();
      LAB_CHECK(cudaStreamSynchronize(s));
      std::vector<float> y(size_t(sh.rows));
      LAB_CHECK(cudaMemcpy(y.data(), sets[0].y, y.size() * 4, cudaMemcpyDeviceToHost));
      double e = 0;
      for (size_t i = 0; i < y.size(); ++i) e = std::max(e, std::fabs(y[i] - ref[i]));
      Result r{sh.name, "persistent chain, counter waits (per stage)"};
      r.rel_err = e / ref_max;
      r.us = time_chain(s, launch_chain) / kSets;
      r.gbps = double(bytes) / (r.us * 1e3);
      results.push_back(r);
    };
    if (sh.cols == 2048)
      run_persistent.template operator()<2, 8>();
    else
      run_persistent.template operator()<4, 2>();
    // The loads alone, as the upfront kernel issues them: the floor of a launch in the chain.
    auto run_read = [&]<int NI, int ROWS>() {
      const int blocks = (sh.rows + kWarps * ROWS - 1) / (kWarps * ROWS);
      measure(
          "loads only, rows/warp " + std::to_string(ROWS),
          [&](const WeightSet& ws) {
            return bool(launch("read", read_only_kernel<NI, ROWS>, dim3(blocks), dim3(kThreads), 0,
                               s, ws.m, sink));
          },
          false);
    };
    if (sh.cols == 2048)
      run_read.template operator()<2, 6>();
    else
      run_read.template operator()<4, 1>();
    for (WeightSet& ws : sets) {
      LAB_CHECK(cudaFree(const_cast<void*>(ws.m.w)));
      LAB_CHECK(cudaFree(const_cast<uint32_t*>(ws.m.sb)));
      LAB_CHECK(cudaFree(ws.y));
    }
  }
  // The expert gate/up launch with routing in its prologue, against sel given and the routing
  // kernel alone (weights of 257 stacked experts of 512 rows; the same launch 30 times).
  {
    const int E = 256, k = 8, ff = 512, H = 2048, rows = (E + 1) * ff;
    void *gw, *uw;
    uint32_t *gsb, *usb;
    float *logits, *sel_w, *act;
    int* sel;
    LAB_CHECK(cudaMalloc(&gw, size_t(rows) * 64 * 16));
    LAB_CHECK(cudaMalloc(&uw, size_t(rows) * 64 * 16));
    LAB_CHECK(cudaMalloc(&gsb, size_t(rows) * 32 * 4));
    LAB_CHECK(cudaMalloc(&usb, size_t(rows) * 32 * 4));
    LAB_CHECK(cudaMalloc(&logits, (E + 1) * 4));
    LAB_CHECK(cudaMalloc(&sel_w, 32 * 4));
    LAB_CHECK(cudaMalloc(&sel, 32 * 4));
    LAB_CHECK(cudaMalloc(&act, size_t(k + 1) * ff * 4));
    if (!launch_fill_random(gw, int64_t(rows) * 64 * 4, 1, s) ||
        !launch_fill_random(uw, int64_t(rows) * 64 * 4, 2, s) ||
        !launch_fill_scale_bias(gsb, int64_t(rows) * 32, 0.05f, 4, 3, s) ||
        !launch_fill_scale_bias(usb, int64_t(rows) * 32, 0.05f, 4, 4, s) ||
        !launch_fill_uniform_f32(logits, E + 1, -3.f, 3.f, 5, s))
      return 1;
    MoeParams p;
    auto mat = [](const void* w, const uint32_t* sb, int r) {
      DevMatrix m;
      m.w = w, m.sb = sb, m.rows = r, m.cols = 2048, m.units = 64, m.group = 64;
      m.fmt = DevFormat::q4;
      return m;
    };
    p.gate = mat(gw, gsb, rows), p.up = mat(uw, usb, rows);
    p.n_ff = ff, p.n_embd = H, p.n_slot = k + 1, p.x = x, p.norm = norm;
    p.logits = logits, p.n_expert = E, p.top_k = k, p.sel = sel, p.sel_w = sel_w, p.act = act;
    set_dp4a_enabled(true);
    if (!launch_moe_gate_up(p, s)) return 1;  // sel for the launches without logits
    LAB_CHECK(cudaStreamSynchronize(s));
    MoeParams given = p;
    given.logits = nullptr;
    auto chain = [&](const char* name, const MoeParams& q, bool route) {
      const double us =
          time_chain(s,
                     [&] {
                       for (int i = 0; i < kSets; ++i)
                         if (route ? !launch_moe_route(q, s) : !launch_moe_gate_up(q, s))
                           std::exit(1);
                     }) /
          kSets;
      results.push_back(Result{"moe gate/up 9x512x2048", name, us, 0, -1});
    };
    chain("routing in the prologue", p, false);
    chain("sel given (no routing)", given, false);
    chain("routing kernel alone", p, true);
  }
  // The batched GEMV (decode of several states, issue 32) at 1, 2, 4 and 8 slots on the model's
  // shapes, against its prologue alone on the same grid; 30 weight sets as above.
  {
    const int64_t stride = 16384;
    float *xs, *ys, *codes;
    LAB_CHECK(cudaMalloc(&xs, size_t(kMaxSlots) * stride * 4));
    LAB_CHECK(cudaMalloc(&ys, size_t(kMaxSlots) * stride * 4));
    LAB_CHECK(cudaMalloc(&codes, size_t(kMaxSlots) * stride * 4));
    if (!launch_fill_uniform_f32(xs, kMaxSlots * stride, -1.f, 1.f, 7, s)) return 1;
    struct BShape {
      const char* name;
      int rows, cols;
      DevFormat fmt;
    };
    for (const BShape& sh : {BShape{"gdn in 12352x2048", 12352, 2048, DevFormat::q4},
                             BShape{"out 2048x4096", 2048, 4096, DevFormat::q4},
                             BShape{"router q8 257x2048", 257, 2048, DevFormat::q8}}) {
      const int units = sh.fmt == DevFormat::q4 ? sh.cols / 32 : sh.cols / 16;
      std::vector<DevMatrix> ms(kSets);
      for (int v = 0; v < kSets; ++v) {
        void* w;
        uint32_t* sb;
        LAB_CHECK(cudaMalloc(&w, size_t(sh.rows) * units * 16));
        LAB_CHECK(cudaMalloc(&sb, size_t(sh.rows) * (sh.cols / 64) * 4));
        if (!launch_fill_random(w, int64_t(sh.rows) * units * 4, 300 + v, s) ||
            !launch_fill_scale_bias(sb, int64_t(sh.rows) * (sh.cols / 64), 0.05f, 4, 400 + v, s))
          return 1;
        DevMatrix& m = ms[size_t(v)];
        m.w = w, m.sb = sb, m.rows = sh.rows, m.cols = sh.cols, m.units = units, m.group = 64;
        m.fmt = sh.fmt;
      }
      const int64_t bytes = int64_t(sh.rows) * units * 16 + int64_t(sh.rows) * (sh.cols / 64) * 4;
      for (int slots : {1, 2, 4, 8}) {
        for (int mode : {0, 1, 2}) {  // staged in every block; quantised once: dp4a, tensor cores
          const bool once = mode > 0;
          if (once && slots == 1) continue;
          set_slot_mma_enabled(mode == 2);
          auto params = [&](const DevMatrix& m) {
            GemvParams p;
            p.task[0].m = m, p.task[0].y = ys, p.n_task = 1, p.x = xs, p.cols = sh.cols;
            p.norm = norm;
            p.batch.slots = slots, p.batch.stride = stride;
            if (once) p.x_codes = codes;
            return p;
          };
          if (!launch_gemv(params(ms[0]), s)) return 1;
          LAB_CHECK(cudaStreamSynchronize(s));
          Result r{sh.name, std::string(mode == 2 ? "batched, once, int8 mma, "
                                        : once    ? "batched, x quantised once, "
                                                  : "batched gemv, ") +
                                std::to_string(slots) + " slots"};
          r.us = time_chain(s,
                            [&] {
                              for (int v = 0; v < kSets; ++v)
                                if (!launch_gemv(params(ms[size_t(v)]), s)) std::exit(1);
                            }) /
                 kSets;
          r.gbps = double(bytes) / (r.us * 1e3);
          results.push_back(r);
        }
        for (int blocks : {33}) {
          const size_t smem = x_quant_smem_bytes(sh.cols / 32) * size_t(slots);
          LAB_CHECK(cudaFuncSetAttribute(prologue_slots_kernel,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
          Result q{sh.name, "prologue of " + std::to_string(slots) + " slots, " +
                                std::to_string(blocks) + " blocks"};
          q.us = time_chain(s,
                            [&] {
                              for (int v = 0; v < kSets; ++v)
                                if (!launch("prologue slots", prologue_slots_kernel, dim3(blocks),
                                            dim3(kThreads), smem, s,
                                            static_cast<const float*>(xs), stride, slots,
                                            static_cast<const float*>(norm), sh.cols, ys))
                                  std::exit(1);
                            }) /
                 kSets;
          results.push_back(q);
        }
      }
      for (DevMatrix& m : ms) {
        LAB_CHECK(cudaFree(const_cast<void*>(m.w)));
        LAB_CHECK(cudaFree(const_cast<uint32_t*>(m.sb)));
      }
    }
    LAB_CHECK(cudaFree(xs));
    LAB_CHECK(cudaFree(ys));
    LAB_CHECK(cudaFree(codes));
  }
  std::printf("%-24s %-44s %8s %8s %10s\n", "shape", "variant", "us", "GB/s", "rel err");
  for (const Result& r : results)
    std::printf("%-24s %-44s %8.2f %8.0f %10.2e\n", r.shape.c_str(), r.variant.c_str(), r.us,
                r.gbps, r.rel_err);
  if (argc > 1) {
    FILE* f = std::fopen(argv[1], "w");
    if (!f) return 1;
    std::fprintf(f, "[\n");
    for (size_t i = 0; i < results.size(); ++i)
      std::fprintf(f,
                   "  {\"shape\": \"%s\", \"variant\": \"%s\", \"us\": %.3f, \"gbps\": %.1f, "
                   "\"rel_err\": %.3e}%s\n",
                   results[i].shape.c_str(), results[i].variant.c_str(), results[i].us,
                   results[i].gbps, results[i].rel_err, i + 1 < results.size() ? "," : "");
    std::fprintf(f, "]\n");
    std::fclose(f);
  }
  return 0;
}

// Row-wise prefill kernels: the embedding rows of a chunk's tokens, the RMSNorm of every row into
// the fp16 operand the GEMMs read (and its remainder, for the exact path), the operands' group
// sums (the scaled-code GEMMs' bias steps), and the elementwise steps of a shared expert kept
// apart from the stacked ones.
#include "orchid/backend/cuda/common/device_common.cuh"
#include "orchid/backend/cuda/prefill/prefill_kernels.h"

namespace orchid::cuda {
namespace {

constexpr int kThreads = 256;

// h [T, n_embd] fp32 = dequantised rows tokens[t] of m [n_vocab, n_embd]; a thread per column,
// grid (⌈n_embd / 256⌉, T).
__global__ void kernel_embed_rows(const __grid_constant__ DevMatrix m, const int* tokens, float* h,
                                  int n_embd) {
  const int64_t row = tokens[blockIdx.y];
  float* out = h + size_t(blockIdx.y) * n_embd;
  for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < n_embd; c += gridDim.x * blockDim.x)
    out[c] = matrix_element(m, row, c);
}

// One block per row. With dot_out, also the row's fp32 x̂ · dot_w (dot_w's row 0) into
// dot_out[row · dot_ld].
// x [rows, n] fp32, w [n] → out [rows, n] fp16 bits (out_lo, may be null: the remainder).
__global__ void __launch_bounds__(kThreads)
    kernel_rms_norm_rows_f16(const float* x, const float* w, float eps, int n, uint16_t* out,
                             uint16_t* out_lo, const __grid_constant__ DevMatrix dot_w,
                             float* dot_out, int dot_ld) {
  __shared__ float scratch[64];
  const int64_t row = int64_t(blockIdx.x) * n;
  const float* xr = x + row;
  // Σ x², and Σ x · w · dot_w, which times the norm's factor is x̂ · dot_w: one reduction.
  float2 sums = make_float2(0.f, 0.f);
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    sums.x = fmaf(xr[i], xr[i], sums.x);
    if (dot_out) sums.y = fmaf(xr[i] * w[i], matrix_element(dot_w, 0, i), sums.y);
  }
  sums = block_sum2(sums, scratch);
  const float inv = rsqrtf(sums.x / float(n) + eps);
  for (int i = threadIdx.x; i < n; i += blockDim.x)
    store_f16_split(xr[i] * inv * w[i], out, out_lo, row + i);
  if (dot_out && threadIdx.x == 0) dot_out[int64_t(blockIdx.x) * dot_ld] = sums.y * inv;
}

// Thread per (token, column) of the shared expert kept apart: act = fp16(silu(gate) · up), gate
// and up [T, n] each.
// act, act_lo (may be null) [T, n] fp16 bits; n_all = T · n.
__global__ void kernel_silu_mul_rows_f16(const float* gate, const float* up, int64_t n_all,
                                         uint16_t* act, uint16_t* act_lo) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= n_all) return;
  const float g = gate[i];
  store_f16_split(g / (1.f + expf(-g)) * up[i], act, act_lo, i);
}

// Eight threads a (row, group): each sums 8 of the group's 64 elements (hi + lo), the eight
// reduce by shuffles; the first writes R_hi twice and R_lo, the others the zeros around them
// (launch_group_sums' layout: row blocks hi and lo of `half` values each).
// hi, lo (may be null) [rows, lda] fp16 bits, groups = k / 64 → sums [rows, 2 · half] fp16
// bits; n_threads = rows · groups · 8.
__global__ void kernel_group_sums(const uint16_t* hi, const uint16_t* lo, int64_t n_threads,
                                  int groups, int lda, int half, uint16_t* sums) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= n_threads) return;  // whole groups of 8 lanes leave
  const int p = int(i & 7), g = int(i / 8 % groups);
  const int64_t row = i / 8 / groups, at = row * lda + 64 * g + 8 * p;
  const uint4 h = *reinterpret_cast<const uint4*>(hi + at);
  const uint4 l = lo ? *reinterpret_cast<const uint4*>(lo + at) : make_uint4(0, 0, 0, 0);
  const uint32_t hw[4] = {h.x, h.y, h.z, h.w}, lw[4] = {l.x, l.y, l.z, l.w};
  float sum = 0.f;
#pragma unroll
  for (int w = 0; w < 4; ++w) {
    const float2 a = __half22float2(*reinterpret_cast<const __half2*>(&hw[w]));
    const float2 b = __half22float2(*reinterpret_cast<const __half2*>(&lw[w]));
    sum += (a.x + b.x) + (a.y + b.y);
  }
  const unsigned eight =
      0xffu << (threadIdx.x & 24);  // this group's lanes (the others may be gone)
  sum += __shfl_xor_sync(eight, sum, 1);
  sum += __shfl_xor_sync(eight, sum, 2);
  sum += __shfl_xor_sync(eight, sum, 4);
  uint16_t* const sh = sums + row * 2 * half;  // the hi block, then the lo block
  uint16_t* const sl = sh + half;
  if (p == 0) {
    const float r = f16_saturate(sum * (1.f / 64));
    const __half rh = __float2half_rn(r);
    sh[g] = sh[groups + g] = __half_as_ushort(rh);
    sl[g] = __half_as_ushort(__float2half_rn(r - __half2float(rh)));
  } else if (p == 1) {
    sl[groups + g] = 0;
  } else {
    for (int c = 6 * g + p - 2; c < half - 2 * groups; c += 6 * groups)
      sh[2 * groups + c] = sl[2 * groups + c] = 0;
  }
}

// y[t, c] *= sigmoid(logit[t · ld]) (the shared expert's gate), y rows ldy apart.
// y [T, ldy] fp32 (its first n columns), logit [T · ld]; a thread per (t, c).
__global__ void kernel_scale_rows_sigmoid(float* y, int64_t ldy, int T, int n, const float* logit,
                                          int ld) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= int64_t(T) * n) return;
  const int64_t t = i / n, c = i % n;
  y[t * ldy + c] *= 1.f / (1.f + expf(-logit[t * ld]));
}

}  // namespace

Status launch_silu_mul_rows_f16(const float* gate, const float* up, int T, int n, uint16_t* act,
                                uint16_t* act_lo, cudaStream_t s) {
  const int64_t n_all = int64_t(T) * n;
  if (n_all < 1) return err("silu·mul rows: ", T, " × ", n);
  kernel_silu_mul_rows_f16<<<unsigned((n_all + kThreads - 1) / kThreads), kThreads, 0, s>>>(
      gate, up, n_all, act, act_lo);
  return last_launch("silu*mul rows");
}

Status launch_group_sums(const uint16_t* hi, const uint16_t* lo, int rows, int k, int lda,
                         uint16_t* sums, cudaStream_t s) {
  if (rows < 0 || k < 64 || k % 64 != 0 || lda < k || lda % 8 != 0)
    return err("group sums: ", rows, " rows of ", k, " columns (a multiple of 64; lda ", lda, ")");
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  if (!hi || !sums || !aligned(hi) || !aligned(lo) || !aligned(sums))
    return err("group sums: hi and sums (and lo, if given) must be set and 16-byte aligned");
  if (rows == 0) return {};
  const int64_t n_threads = int64_t(rows) * (k / 64) * 8;
  kernel_group_sums<<<unsigned((n_threads + kThreads - 1) / kThreads), kThreads, 0, s>>>(
      hi, lo, n_threads, k / 64, lda, group_sums_half(k), sums);
  return last_launch("group sums");
}

Status launch_scale_rows_sigmoid(float* y, int64_t ldy, int T, int n, const float* logit, int ld,
                                 cudaStream_t s) {
  const int64_t n_all = int64_t(T) * n;
  if (n_all < 1 || ldy < n) return err("sigmoid-scaled rows: ", T, " × ", n);
  kernel_scale_rows_sigmoid<<<unsigned((n_all + kThreads - 1) / kThreads), kThreads, 0, s>>>(
      y, ldy, T, n, logit, ld);
  return last_launch("sigmoid-scaled rows");
}

Status launch_embed_rows(const DevMatrix& embd, const int* tokens, int T, float* h, int n_embd,
                         cudaStream_t s) {
  if (T < 1 || T > 65535 || n_embd != embd.cols)
    return err("embedding rows: ", T, " tokens of width ", n_embd);
  kernel_embed_rows<<<dim3((n_embd + kThreads - 1) / kThreads, T), kThreads, 0, s>>>(embd, tokens,
                                                                                     h, n_embd);
  return last_launch("embedding rows");
}

Status launch_rms_norm_rows_f16(const float* x, const float* w, float eps, int rows, int n,
                                uint16_t* out, uint16_t* out_lo, cudaStream_t s,
                                const DevMatrix* dot_w, float* dot_out, int dot_ld) {
  if (rows < 1 || n < 1) return err("rms norm rows: ", rows, " × ", n);
  if (dot_out && (!dot_w || dot_w->rows < 1 || dot_w->cols != n || dot_ld < 1))
    return err("rms norm rows: the dot row must be 1 × ", n);
  kernel_rms_norm_rows_f16<<<rows, kThreads, 0, s>>>(
      x, w, eps, n, out, out_lo, dot_out ? *dot_w : DevMatrix{}, dot_out, dot_ld);
  return last_launch("rms norm rows");
}

}  // namespace orchid::cuda

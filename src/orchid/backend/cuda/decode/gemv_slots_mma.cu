// Batched q4 GEMV (2…8 decode slots, issue 32) on the int8 tensor cores, bit for bit what each
// slot's batch-1 dp4a GEMV (decode/gemv_upfront.cu) gives it.
//
// The batch-1 kernel sums a row as: lane l (of 32) chains the terms of units l, l + 32, …
// (unit_term: one fp32 step per 32-element unit from its exact integer sums), then the lanes'
// partials are added in a butterfly over lane bits 16, 8, 4, 2, 1. Integer sums do not depend on
// how they are formed, so here mma.m16n8k32 (u8 weight codes × s8 x̂ codes) makes each unit's
// sums for 16 rows × 4 slots (hi and lo codes: the 8 columns) at once, and each thread replays
// the fp32 part exactly: a leaf's chain over its units, then the leaves added as the butterfly
// adds them (a carry stack over the leaves in bit-reversed order gives the same tree).
//
// Work: a 16-row tile is split between P warps by leaves (P = NI: each warp 32 units of the
// tile; the tile's 16 rows copied into shared memory before the dependency wait); part p takes the
// leaves of bit-reversed index [p · 32/P, (p+1) · 32/P), a subtree, and the tile's warps add
// their subtrees as the butterfly's top levels would. x̂'s codes come from GemvParams::x_codes
// (quantised once a step by gemv_upfront.cu's quantize_slots_kernel); the weights' (scale, bias)
// words are staged in shared memory per tile.
//
// Fragments (PTX ISA, m16n8k32 8-bit): thread (g, q) = (lane / 4, lane % 4) holds A rows g and
// g + 8 at k 4q…4q+3 (a0, a1) and 16+4q… (a2, a3); B column g at the same k (b0, b1); C rows g,
// g + 8, columns 2q, 2q + 1. Logical k 4q + e is the unit's element 8q + 2e and 16 + 4q + e is
// element 8q + 2e + 1 — the even and odd nibbles of word q, the order dp4a_q4.cuh packs x̂'s
// codes in (he, ho, le, lo per word). Column 2s is slot s's hi codes, 2s + 1 its lo codes, so
// thread (g, q) gets H and L of slot q for rows g and g + 8: the two terms it replays.
#include <algorithm>
#include <atomic>

#include "orchid/backend/cuda/common/mma_sync.cuh"
#include "orchid/backend/cuda/decode/dp4a_q4.cuh"

namespace orchid::cuda {
namespace {

std::atomic<bool> g_slot_mma{true};

constexpr int kThreads = 256, kWarps = kThreads / 32;

__device__ __forceinline__ void mma_u8s8(int (&c)[4], const uint32_t (&a)[4], int b0, int b1) {
  asm(
      "mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};"
      : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The 5-bit reversal of i: leaf i (in butterfly order) is lane rev5(i) of the batch-1 kernel.
__host__ __device__ constexpr int rev5(int i) {
  return ((i & 1) << 4) | ((i & 2) << 2) | (i & 4) | ((i & 8) >> 2) | ((i & 16) >> 4);
}

// NI units a lane of the batch-1 kernel (2: 2,048 columns, 4: 4,096); P = NI warps a tile.
template <int NI>
__global__ void __launch_bounds__(kThreads, 2)
    slots_mma_gemv_kernel(const __grid_constant__ GemvParams p) {
  constexpr int P = NI, L = 32 / P;  // parts a tile, leaves a part
  constexpr int LOG = L == 16 ? 4 : 3;
  constexpr int kTiles = kWarps / P;  // 16-row tiles a block
  constexpr int G = NI * 16;          // groups of 64 a row
  constexpr int kSbStride = G + 4;    // words a staged row: rows g = 0…7 in distinct banks
  constexpr int units = NI * 32;
  constexpr int kRowBytes = units * 16 + 16;
  // A quad's x̂ codes: per slot 4 rows (word q of every unit: int4 (he, ho, le, lo)) of
  // kQWords, then the units' (d, sum). kQWords ≡ 4 and kSlotWords ≡ 16 (mod 32): a half warp's
  // B loads (2 slots × 4 q × hi/lo, 8 bytes each) cover the 32 banks once.
  constexpr int kQWords = 4 * units + 4, kSlotWords = 4 * kQWords + 2 * units;
  constexpr int kCodeChunks = 4 * units + units / 2;  // 16-byte pieces a slot
  static_assert(kQWords % 32 == 4 && kSlotWords % 32 == 16);
  // Dynamic shared memory: [kTiles][16 rows][kRowBytes] the tiles' weights, then the codes.
  extern __shared__ float4 smem4[];
  unsigned char* smem = reinterpret_cast<unsigned char*>(smem4);
  unsigned char* codes = smem + kTiles * 16 * kRowBytes;
  __shared__ __align__(16) uint32_t sbs[kTiles][16 * kSbStride];
  __shared__ float part[kTiles][P][16][4];  // each part's subtree sums: [row][slot of the quad]

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
  const int tile = warp / P, pt = warp % P;
  // Leaf rev5(pt · L + i) = rev5(i) + lo: pt sits in the high bits of the index, i in the low
  // ones, so every unit's offset is a constant from one base a part.
  const int lo = rev5(pt * L);
  const int row0 = (blockIdx.x * kTiles + tile) * 16;

  int end[kMaxGemvTasks];  // rows of tasks 0..t, concatenated
  const int total = task_rows(p, end);

  // The tile's 16 rows copied into shared memory before the wait by its P warps, whole rows in
  // order (coalesced; rows past the end read as zero). A row takes kRowBytes: rows g = 0…7 at
  // the same word fall in distinct banks.
  unsigned char* ws = smem + tile * 16 * kRowBytes;
  for (int c = pt * 32 + lane; c < 16 * units; c += P * 32) {
    const int r = c / units, u = c % units, rr = row0 + r;
    const uint4* src = static_cast<const uint4*>(p.task[0].m.w);
    if (rr < total) {
      const int t = task_of(end, rr);
      src = static_cast<const uint4*>(p.task[t].m.w) + int64_t(rr - task_begin(end, t)) * units + u;
    }
    cp_async16(ws + r * kRowBytes + u * 16, src, rr < total ? 16 : 0);
  }
  // The tile's (scale, bias) words, copied by its P warps (16-byte pieces, G / 4 a row).
  for (int idx = pt * 32 + lane; idx < 16 * (G / 4); idx += P * 32) {
    const int r = idx / (G / 4), c = idx % (G / 4), rr = row0 + r;
    const uint32_t* src = p.task[0].m.sb;
    if (rr < total) {
      const int t = task_of(end, rr);
      src = p.task[t].m.sb + int64_t(rr - task_begin(end, t)) * G + 4 * c;
    }
    cp_async16(&sbs[tile][r * kSbStride + 4 * c], src, rr < total ? 16 : 0);
  }
  cp_async_commit();
  grid_dep_wait();
  grid_dep_release();
  const int64_t stride = p.batch.stride;
  unsigned live = 0;
  for (int b = 0; b < p.batch.slots; ++b)
    if (!(p.halt && p.halt[b * stride])) live |= 1u << b;
  cp_async_wait<0>();
  __syncthreads();  // weights and sbs staged
  if (live == 0) return;

  // Unit u = rev5(i) + lo + 32j is in group (rev5(i) >> 1) + (lo >> 1) + 16j (rev5(i) is a
  // multiple of P, lo < P).
  const unsigned char* wq = ws + g * kRowBytes + lo * 16 + q * 4;
  const uint32_t* sb_g = &sbs[tile][g * kSbStride] + (lo >> 1);
  const uint32_t* sb_g8 = &sbs[tile][(g + 8) * kSbStride] + (lo >> 1);
  // Slots four at a time (the quad's columns); the weights stay in registers.
  for (int s0 = 0; s0 < p.batch.slots; s0 += 4) {
    if (!(live >> s0 & 15u)) continue;  // uniform
    // The quad's codes and (d, sum) pairs into shared memory (read from L2 inside the loop, each
    // unit's load sat on the chain: 8.7 µs a quad at 12,352 rows).
    for (int idx = threadIdx.x; idx < 4 * kCodeChunks; idx += kThreads) {
      const int sl = idx / kCodeChunks, c = idx % kCodeChunks;
      if (s0 + sl >= p.batch.slots) continue;
      const uint4* src = reinterpret_cast<const uint4*>(p.x_codes + (s0 + sl) * stride) + c;
      unsigned char* dst = codes + sl * kSlotWords * 4 +
                           (c < 4 * units ? (c / units) * kQWords * 4 + (c % units) * 16
                                          : 4 * kQWords * 4 + (c - 4 * units) * 16);
      cp_async16(dst, src);
    }
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
    // B: column g is slot s0 + g / 2, its hi (even g) or lo codes; the epilogue's slot is s0 + q.
    const int2* bq = reinterpret_cast<const int2*>(codes + (g >> 1) * kSlotWords * 4 +
                                                   q * kQWords * 4 + lo * 16) +
                     (g & 1);
    const float2* xd_lo =
        reinterpret_cast<const float2*>(codes + q * kSlotWords * 4 + 4 * kQWords * 4) + lo;
    float stack[LOG + 1][2] = {};
#pragma unroll
    for (int i = 0; i < L; ++i) {
      float acc[2] = {0.f, 0.f};
#pragma unroll
      for (int j = 0; j < NI; ++j) {
        const int u = rev5(i) + 32 * j;  // past lo
        // B: x̂ codes of word q of unit u (int4 at xq[q · units + u], its hi or lo half).
        const int2 b = bq[2 * u];
        // A: word q of unit u, rows g and g + 8.
        const uint32_t w0 = *reinterpret_cast<const uint32_t*>(wq + u * 16);
        const uint32_t w1 = *reinterpret_cast<const uint32_t*>(wq + 8 * kRowBytes + u * 16);
        uint32_t a[4];
        a[0] = w0 & 0x0f0f0f0fu;
        a[1] = w1 & 0x0f0f0f0fu;
        a[2] = (w0 >> 4) & 0x0f0f0f0fu;
        a[3] = (w1 >> 4) & 0x0f0f0f0fu;
        int c[4] = {0, 0, 0, 0};
        mma_u8s8(c, a, b.x, b.y);
        const float2 xd = xd_lo[u];
        const int grp = (rev5(i) >> 1) + 16 * j;  // past lo >> 1
        acc[0] = unit_term(c[0] * 16, c[1] * 16, xd.x, xd.y, sb_g[grp], acc[0]);
        acc[1] = unit_term(c[2] * 16, c[3] * 16, xd.x, xd.y, sb_g8[grp], acc[1]);
      }
      // Push the leaf: add it to the stacked subtrees its index closes (carry of i + 1).
      int k = 0;
#pragma unroll
      for (; k < LOG && ((i >> k) & 1); ++k) {
        acc[0] = stack[k][0] + acc[0];
        acc[1] = stack[k][1] + acc[1];
      }
#pragma unroll
      for (int kk = 0; kk <= LOG; ++kk)
        if (kk == k) stack[kk][0] = acc[0], stack[kk][1] = acc[1];
    }
    // Rows g, g + 8 of slot s0 + q: this part's subtree.
    part[tile][pt][g][q] = stack[LOG][0];
    part[tile][pt][g + 8][q] = stack[LOG][1];
    __syncthreads();
    // The tile's parts added as the butterfly's top levels add them; one thread a (row, slot).
    if (pt == 0) {
      for (int e = lane; e < 64; e += 32) {
        const int r = e >> 2, sl = e & 3, slot = s0 + sl, rr = row0 + r;
        float v;
        if constexpr (P == 2)
          v = part[tile][0][r][sl] + part[tile][1][r][sl];
        else
          v = (part[tile][0][r][sl] + part[tile][1][r][sl]) +
              (part[tile][2][r][sl] + part[tile][3][r][sl]);
        if (slot < p.batch.slots && (live >> slot & 1) && rr < total) {
          const int t = task_of(end, rr), row = rr - task_begin(end, t);
          const GemvTask& tk = p.task[t];
          const int64_t so = int64_t(slot) * stride;
          tk.y[so + row] = tk.add ? tk.add[so + row] + v : v;
        }
      }
    }
    __syncthreads();  // part reused by the next quad
  }
}

template <int NI>
Status launch_ni(const GemvParams& p, int total, cudaStream_t s) {
  constexpr int kTileRows = 16 * (kWarps / NI);
  constexpr int units = NI * 32;
  constexpr size_t kSmem = size_t(kWarps / NI) * 16 * (units * 16 + 16) +
                          4 * size_t(4 * (4 * units + 4) + 2 * units) * 4;
  const auto kernel = slots_mma_gemv_kernel<NI>;
  // All of an SM's shared memory for shared memory: 2,048 columns fit two blocks an SM (one
  // wave for the in-projections), 4,096 one.
  if (cudaError_t e =
          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmem));
      e != cudaSuccess)
    return err("slots mma gemv: ", cudaGetErrorString(e));
  if (cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                           int(cudaSharedmemCarveoutMaxShared));
      e != cudaSuccess)
    return err("slots mma gemv: ", cudaGetErrorString(e));
  const int blocks = (total + kTileRows - 1) / kTileRows;
  return launch("slots mma gemv", kernel, dim3(blocks), dim3(kThreads), kSmem, s, p);
}

}  // namespace

bool slot_mma_enabled() {
  return g_slot_mma.load(std::memory_order_relaxed);
}
void set_slot_mma_enabled(bool on) {
  g_slot_mma.store(on, std::memory_order_relaxed);
}

Expected<bool> launch_slots_mma_gemv(const GemvParams& p, int total, cudaStream_t s) {
  const DevMatrix& m = p.task[0].m;
  if (!slot_mma_enabled() || !p.x_codes || p.batch.slots < 2 || m.fmt != DevFormat::q4 ||
      m.group != 64)
    return false;
  if (m.units != 64 && m.units != 128) return false;
  if (Status st = m.units == 64 ? launch_ni<2>(p, total, s) : launch_ni<4>(p, total, s); !st.ok())
    return st.error();
  return true;
}

}  // namespace orchid::cuda

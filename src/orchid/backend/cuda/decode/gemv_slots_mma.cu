// Batched q4 GEMV (2…8 decode slots, issue 32) on the int8 tensor cores, bit for bit what each
// slot's batch-1 dp4a GEMV (decode/gemv_upfront.cu) gives it: decode/slots_mma.cuh has how.
//
// Work: a 16-row tile is split between P = NI warps by leaves (each warp 32 units of the tile;
// the tile's 16 rows copied into shared memory before the dependency wait), and the tile's warps
// add their subtrees as the butterfly's top levels would. x̂'s codes come from
// GemvParams::x_codes (quantised once a step by gemv_upfront.cu's quantize_slots_kernel); the
// weights' (scale, bias) words are staged in shared memory per tile.
#include <algorithm>
#include <atomic>

#include "orchid/backend/cuda/decode/slots_mma.cuh"

namespace orchid::cuda {
namespace {

std::atomic<bool> g_slot_mma{true};

constexpr int kThreads = 256, kWarps = kThreads / 32;

// NI units a lane of the batch-1 kernel (2: 2,048 columns, 4: 4,096); P = NI warps a tile.
template <int NI>
__global__ void __launch_bounds__(kThreads, 2)
    slots_mma_gemv_kernel(const __grid_constant__ GemvParams p) {
  constexpr int P = NI, L = 32 / P;  // parts a tile, leaves a part
  constexpr int kTiles = kWarps / P;  // 16-row tiles a block
  constexpr int G = NI * 16;          // groups of 64 a row
  constexpr int kSbStride = G + 4;    // words a staged row: rows g = 0…7 in distinct banks
  constexpr int units = NI * 32;
  constexpr int kRowBytes = units * 16 + 16;
  // Dynamic shared memory: [kTiles][16 rows][kRowBytes] the tiles' weights, then every slot's
  // codes (MmaCodes), the quads side by side.
  extern __shared__ float4 smem4[];
  unsigned char* smem = reinterpret_cast<unsigned char*>(smem4);
  unsigned char* codes = smem + kTiles * 16 * kRowBytes;
  __shared__ __align__(16) uint32_t sbs[kTiles][16 * kSbStride];
  __shared__ float part[kTiles][P][16][4];  // each part's subtree sums: [row][slot of the quad]

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
  const int tile = warp / P, pt = warp % P;
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
  // All slots' codes and (d, sum) pairs at once: one L2 round trip a launch, not one a quad (a
  // halted slot's codes are copied too, never stored from).
  MmaCodes<units>::copy(codes, p.x_codes, stride, p.batch.slots);
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();  // weights, sbs and codes staged
  if (live == 0) return;

  // Unit u = rev5(i) + lo + 32j is in group (rev5(i) >> 1) + (lo >> 1) + 16j (rev5(i) is a
  // multiple of P, lo < P).
  const unsigned char* wq = ws + g * kRowBytes + lo * 16 + q * 4;
  const uint32_t* sb_g = &sbs[tile][g * kSbStride] + (lo >> 1);
  const uint32_t* sb_g8 = &sbs[tile][(g + 8) * kSbStride] + (lo >> 1);
  // Slots four at a time (the quad's columns).
  for (int s0 = 0; s0 < p.batch.slots; s0 += 4) {
    if (!(live >> s0 & 15u)) continue;  // uniform
    float sums[2];
    part_sums<NI, L>(
        [&](int i, int j, int r) {
          return *reinterpret_cast<const uint32_t*>(wq + r * 8 * kRowBytes + (rev5(i) + 32 * j) * 16);
        },
        [&](int i, int j, int r) { return (r ? sb_g8 : sb_g)[(rev5(i) >> 1) + 16 * j]; },
        codes + s0 * MmaCodes<units>::kSlotBytes, g, q, lo, sums);
    // Rows g, g + 8 of slot s0 + q: this part's subtree.
    part[tile][pt][g][q] = sums[0];
    part[tile][pt][g + 8][q] = sums[1];
    __syncthreads();
    // The tile's parts added as the butterfly's top levels add them; one thread a (row, slot).
    if (pt == 0) {
      for (int e = lane; e < 64; e += 32) {
        const int r = e >> 2, sl = e & 3, slot = s0 + sl, rr = row0 + r;
        const float v = sum_parts<P>([&](int k) { return part[tile][k][r][sl]; });
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
  constexpr size_t kTilesBytes = size_t(kWarps / NI) * 16 * (units * 16 + 16);
  constexpr size_t kSmem = kTilesBytes + kMaxSlots * size_t(MmaCodes<units>::kSlotBytes);
  // The launch's codes take whole quads: up to 4 slots keep 4,096 columns at two blocks an SM.
  const size_t smem =
      kTilesBytes + size_t((p.batch.slots + 3) / 4 * 4) * MmaCodes<units>::kSlotBytes;
  const auto kernel = slots_mma_gemv_kernel<NI>;
  // All of an SM's shared memory for shared memory: 2,048 columns fit two blocks an SM at any
  // slot count (one wave for the in-projections: 113.5 KB a block at 8 slots, of 228), 4,096
  // columns two up to 4 slots and one past (their 2,048 rows are 64 blocks).
  if (cudaError_t e =
          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmem));
      e != cudaSuccess)
    return err("slots mma gemv: ", cudaGetErrorString(e));
  if (cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                           int(cudaSharedmemCarveoutMaxShared));
      e != cudaSuccess)
    return err("slots mma gemv: ", cudaGetErrorString(e));
  const int blocks = (total + kTileRows - 1) / kTileRows;
  return launch("slots mma gemv", kernel, dim3(blocks), dim3(kThreads), smem, s, p);
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
  if (!slot_mma_enabled() || !p.x_codes || p.batch.slots < 2 || p.batch.slots > kMaxSlots ||
      m.fmt != DevFormat::q4 || m.group != 64)
    return false;
  if (m.units != 64 && m.units != 128) return false;
  if (Status st = m.units == 64 ? launch_ni<2>(p, total, s) : launch_ni<4>(p, total, s); !st.ok())
    return st.error();
  return true;
}

}  // namespace orchid::cuda

// The batched lm_head (2…8 decode slots, issue 32): 248,320 q4 rows of 2,048 columns read once
// a step for all slots, every slot's products on the int8 tensor cores bit for bit what its
// batch-1 bulk stream (decode/gemv_bulk.cu) computes (decode/slots_mma.cuh: the butterfly
// replayed), then each slot's own pick (argmax or Gumbel-max sampling) as finish_argmax_slots
// makes it.
//
// Why: the bulk stream's batched form multiplied each staged row with every slot's x̂ on dp4a
// (16 dp4a + 8 logic ops + the fp32 term a unit and slot): at 8 slots 0.28 ms a step against
// 69 µs for the bytes alone, the largest compute-bound piece of the batched step. Here a unit's
// integer sums for 16 rows × 4 slots are one mma; the fp32 term a (row, slot, unit) remains.
//
// Work: one block an SM (512 threads) walks chunks of kRows = 32 rows (block b takes chunks b,
// b + G, …) through kStages stages the copy engine fills, as the bulk stream does; each row (and
// its (scale, bias) words) is its own bulk copy into a padded stride, so that rows g = 0…7 at the
// same word fall in distinct banks for the A fragments. A chunk is two 16-row tiles of 8 warps;
// warp p of a tile takes the leaves [4p, 4p + 4) (P = 8, L = 4). The parts' subtrees go to
// shared memory (double-buffered by chunk parity: one barrier a chunk), and 128 threads a tile
// add them (sum_parts) and keep their (row, slot)'s best key: thread t's slot is t % 8 for good.
// x̂'s codes: quantised once a step into GemvParams::x_codes (launch_quantize_slots), staged
// once a block.
#include <atomic>

#include "orchid/backend/cuda/common/wgmma.cuh"
#include "orchid/backend/cuda/decode/slots_mma.cuh"

namespace orchid::cuda {
namespace {

constexpr int kThreads = 512, kWarps = kThreads / 32;
constexpr int NI = 2, kUnits = 32 * NI;  // 2,048 columns
constexpr int kGroups = kUnits / 2;      // (scale, bias) words a row
constexpr int P = 8;                     // parts a tile
constexpr int kMinSlots = 7;             // fewer: the bulk stream's dp4a form (launch_lm_head_slots)
[[maybe_unused]] constexpr int L = 32 / P;  // leaves a part
constexpr int kTiles = kWarps / P;       // 16-row tiles a chunk
constexpr int kRows = 16 * kTiles;       // a chunk: 32 rows
constexpr int kRowBytes = kUnits * 16 + 16;  // a staged row: 1,040 bytes (4 words ≡ 4 mod 32)
constexpr int kSbStride = kGroups + 4;       // words a staged row of (scale, bias): ≡ 4 mod 32
constexpr int kStageW = kRows * kRowBytes;
constexpr int kStageBytes = kStageW + kRows * kSbStride * 4;  // 37,888
constexpr int kStages = 4;                                    // ~148 KB in flight
using Codes = MmaCodes<kUnits>;
constexpr size_t kCodesOffset = size_t(kStages) * kStageBytes;
constexpr size_t kPartOffset = kCodesOffset + size_t(kMaxSlots) * Codes::kSlotBytes;
// part[2][kTiles][P][16 rows][kMaxSlots]: each part's subtree sums, by chunk parity.
constexpr size_t kPartBytes = size_t(2) * kTiles * P * 16 * kMaxSlots * sizeof(float);
constexpr size_t kBarOffset = kPartOffset + kPartBytes;
constexpr size_t kSmemBytes = kBarOffset + kStages * (sizeof(uint64_t) + sizeof(int));
static_assert(kStageBytes % 16 == 0 && kCodesOffset % 16 == 0 && kBarOffset % 8 == 0);
static_assert(kMaxSlots == 8, "a combining thread's slot is its lane % 8");

#if defined(__CUDA_ARCH_FEAT_SM90_ALL) || !defined(__CUDA_ARCH__)
// Warp-wide: requests chunk `chunk` into the stage at shared address `stage`, completing on
// `bar`: lane r copies row r and its (scale, bias) words, after lane 0 has set the bytes to
// expect.
__device__ __forceinline__ void request_rows(const DevMatrix& m, int chunk, uint32_t stage,
                                             uint32_t bar, int lane) {
  const int row0 = chunk * kRows, n = min(kRows, m.rows - row0);
  if (lane == 0) mbar_arrive_expect_tx(bar, uint32_t(n) * (kUnits * 16 + kGroups * 4));
  __syncwarp();
  if (lane < n) {
    const int64_t row = row0 + lane;
    bulk_copy_to_shared(stage + lane * kRowBytes, static_cast<const uint4*>(m.w) + row * kUnits,
                        kUnits * 16, bar);
    bulk_copy_to_shared(stage + kStageW + lane * kSbStride * 4, m.sb + row * kGroups, kGroups * 4,
                        bar);
  }
}
#endif

// GemvParams: one q4 task of 2,048 columns, argmax epilogue, p.batch.slots (2…8) slots with
// x_codes quantised; dynamic shared memory kSmemBytes. sm_90a code only.
__global__ void __launch_bounds__(kThreads, 1)
    lm_head_slots_kernel(const __grid_constant__ GemvParams p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(128) unsigned char smem[];
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + kBarOffset);
  int* done = reinterpret_cast<int*>(full + kStages);
  unsigned char* codes = smem + kCodesOffset;
  float* part = reinterpret_cast<float*>(smem + kPartOffset);
  const uint32_t stages = smem_addr(smem), bars = smem_addr(full);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, q = lane & 3;
  const int tile = warp / P, pt = warp % P, lo = rev5(pt * L);
  const DevMatrix& m = p.task[0].m;
  const int rows = m.rows, n_chunk = (rows + kRows - 1) / kRows;
  const int grid = int(gridDim.x), mine = (n_chunk - int(blockIdx.x) + grid - 1) / grid;
  const int slots = p.batch.slots;
  const int64_t stride = p.batch.stride;

  if (warp == 0) {
    if (lane == 0) {
      for (int s = 0; s < kStages; ++s) mbar_init(bars + 8 * s, 1), done[s] = 0;
      fence_proxy_async();  // the copy engine sees the initialised barriers
    }
    __syncwarp();
    for (int j = 0; j < min(kStages, mine); ++j)
      request_rows(m, int(blockIdx.x) + j * grid, stages + j * kStageBytes, bars + 8 * j, lane);
  }
  grid_dep_wait();
  grid_dep_release();
  unsigned live = 0;  // slots not halted by an earlier stop id
  for (int b = 0; b < slots; ++b)
    if (!(p.halt && p.halt[b * stride])) live |= 1u << b;
  if (live == 0) {
    // The requested stages land in this block's shared memory: keep it until they have.
    if (threadIdx.x == 0)
      for (int j = 0; j < min(kStages, mine); ++j) mbar_wait(bars + 8 * j, 0);
    return;
  }
  Codes::copy(codes, p.x_codes, stride, slots);
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();  // codes staged; the barriers initialised

  // The combining threads: 128 a tile, (row, slot) = (t / 8, t % 8) of the tile's 16 × 8.
  const int t_in_tile = pt * 32 + lane, my_slot = lane & 7;
  const bool combines = t_in_tile < 16 * kMaxSlots && my_slot < slots && (live >> my_slot & 1);
  const float inv_temp = p.slot_inv_temp[my_slot < slots ? my_slot : 0];
  const uint64_t key_base =
      combines && inv_temp > 0.f
          ? p.slot_seed[my_slot] * 0x9e3779b97f4a7c15ull + uint64_t(p.pos[my_slot * stride])
          : 0;
  float best_v = -INFINITY;
  int best_i = 0x7fffffff;

  for (int j = 0; j < mine; ++j) {
    const int s = j % kStages, chunk = int(blockIdx.x) + j * grid;
    mbar_wait(bars + 8 * s, uint32_t(j / kStages) & 1u);
    const unsigned char* st = smem + size_t(s) * kStageBytes;
    // This warp's A words and (scale, bias) words into registers: its tile's rows g and g + 8,
    // units rev5(i) + lo + 32 jj. Past the matrix's end they are stale bytes never picked.
    uint32_t wreg[L][NI][2], sreg[L][NI][2];
    {
      const unsigned char* wq = st + (tile * 16 + g) * kRowBytes + lo * 16 + q * 4;
      const uint32_t* sb = reinterpret_cast<const uint32_t*>(st + kStageW) +
                           (tile * 16 + g) * kSbStride + (lo >> 1);
#pragma unroll
      for (int i = 0; i < L; ++i)
#pragma unroll
        for (int jj = 0; jj < NI; ++jj) {
          const int u = rev5(i) + 32 * jj, grp = (rev5(i) >> 1) + 16 * jj;
          wreg[i][jj][0] = *reinterpret_cast<const uint32_t*>(wq + u * 16);
          wreg[i][jj][1] = *reinterpret_cast<const uint32_t*>(wq + 8 * kRowBytes + u * 16);
          sreg[i][jj][0] = sb[grp];
          sreg[i][jj][1] = sb[8 * kSbStride + grp];
        }
    }
    // The last warp to finish reading the stage refills it with the chunk kStages rounds on.
    __syncwarp();
    int last = 0;
    if (lane == 0) {
      __threadfence_block();
      if (atomicAdd(done + s, 1) == kWarps - 1) {
        done[s] = 0;
        __threadfence_block();
        last = 1;
      }
    }
    if (__shfl_sync(0xffffffffu, last, 0) && j + kStages < mine) {
      fence_proxy_async();  // the stage's generic reads before the copy engine's writes
      request_rows(m, chunk + kStages * grid, stages + s * kStageBytes, bars + 8 * s, lane);
    }
    float* pb = part + size_t(j & 1) * kTiles * P * 16 * kMaxSlots;
    for (int s0 = 0; s0 < slots; s0 += 4) {
      if (!(live >> s0 & 15u)) continue;  // uniform
      float sums[2];
      part_sums<NI, L>([&](int i, int jj, int r) { return wreg[i][jj][r]; },
                       [&](int i, int jj, int r) { return sreg[i][jj][r]; },
                       codes + s0 * Codes::kSlotBytes, g, q, lo, sums);
      float* row_g = pb + ((tile * P + pt) * 16 + g) * kMaxSlots + s0 + q;
      row_g[0] = sums[0];
      row_g[8 * kMaxSlots] = sums[1];
    }
    __syncthreads();  // the parts written (the other parity's readers are past the last one)
    if (combines) {
      const int r = t_in_tile >> 3, row = chunk * kRows + tile * 16 + r;
      const float v = sum_parts<P>(
          [&](int k) { return pb[((tile * P + k) * 16 + r) * kMaxSlots + my_slot]; });
      if (row < rows) {
        const float key = pick_key_with(inv_temp, nullptr, key_base, v, row);
        if (better(key, row, best_v, best_i)) best_v = key, best_i = row;
      }
    }
  }
  float bv[kMaxSlots];
  int bi[kMaxSlots];
#pragma unroll
  for (int b = 0; b < kMaxSlots; ++b)
    bv[b] = b == my_slot && combines ? best_v : -INFINITY, bi[b] = b == my_slot ? best_i : 0x7fffffff;
  finish_argmax_slots<kThreads>(p, bv, bi, live);
#elif __CUDA_ARCH__ >= 900
  __trap();  // Hopper code built without sm_90a features: fail loudly, never skip the rows
#endif
}

}  // namespace

bool lm_head_slots_supported() {
  static const bool ok = [] {
    const auto kernel = lm_head_slots_kernel;
    const bool r = sm90a_kernel_runs(reinterpret_cast<const void*>(kernel), kSmemBytes) &&
                   cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        int(kSmemBytes)) == cudaSuccess;
    cudaGetLastError();  // the probes' errors, if any, are answered by `r`
    return r;
  }();
  return ok;
}

Expected<bool> launch_lm_head_slots(const GemvParams& p, cudaStream_t s) {
  const DevMatrix& m = p.task[0].m;
  // Below 7 slots the bulk stream's dp4a form is as fast or faster (measured at 2 / 4 / 8 slots:
  // 0.206 / 0.209 / 0.251 ms here, 0.100 / 0.159 / 0.279 there).
  if (!slot_mma_enabled() || p.batch.slots < kMinSlots || !p.x_codes || p.n_task != 1 ||
      p.epilogue != GemvEpilogue::argmax || p.task[0].y || p.allowed || m.fmt != DevFormat::q4 ||
      m.group != 64 || m.units != kUnits || p.cols != kUnits * 32)
    return false;
  if (p.batch.slots > kMaxSlots || !p.slot_inv_temp || !p.slot_seed || !p.host_token)
    return err("lm_head slots: at most ", kMaxSlots, " slots, each with its temperature and seed");
  if (reinterpret_cast<uintptr_t>(m.w) % 16 != 0 || reinterpret_cast<uintptr_t>(m.sb) % 16 != 0 ||
      !lm_head_slots_supported())
    return false;
  if (Status st = launch_quantize_slots(p, false, s); !st.ok()) return st.error();
  const int chunks = (m.rows + kRows - 1) / kRows;
  const int blocks = std::max(1, std::min(sm_count(), chunks));
  if (Status st = launch("lm_head slots", lm_head_slots_kernel, dim3(blocks), dim3(kThreads),
                         kSmemBytes, s, p);
      !st.ok())
    return st.error();
  return true;
}

}  // namespace orchid::cuda

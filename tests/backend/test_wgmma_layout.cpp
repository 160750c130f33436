// The wgmma layouts of the CUDA kernels (common/wgmma_layout.h, prefill/flash_attention_wgmma_tile.h) against an
// emulation of what the tensor cores read, written from the PTX ISA's rules rather than from those
// headers: matrix descriptors decoded bit by bit, the canonical K-major and MN-major layouts with
// the 128-byte swizzle applied to address bits, and the m64nNk16 fragment ownership. It runs on
// the CPU, so a wrong swizzle, descriptor or fragment mapping fails here before any GPU run; the
// K-major rule is first checked against the prefill GEMM's tiles, whose layout the H200 runs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <set>
#include <vector>

#include "orchid/backend/cuda/prefill/flash_attention_wgmma_tile.h"
#include "orchid/util/bf16.h"

namespace orchid {
namespace {

// ---- The emulation (PTX ISA: "Matrix Descriptor Format", "Shared Memory Matrix Layout",
// "Register Fragments") --------------------------------------------------------------------------

struct Desc {
  uint32_t start, lbo, sbo, base_offset, mode;
};
Desc decode(uint64_t d) {
  return {uint32_t(d & 0x3fff) << 4, uint32_t((d >> 16) & 0x3fff) << 4,
          uint32_t((d >> 32) & 0x3fff) << 4, uint32_t((d >> 49) & 7), uint32_t(d >> 62)};
}
// The 128-byte swizzle on a shared address (repeating pattern on 1024-byte boundaries, base
// offset 0): 16-byte chunk bits 4-6 XOR row-in-atom bits 7-9.
uint32_t swizzle128(uint32_t addr) {
  return addr ^ (((addr >> 7) & 7) << 4);
}
// Byte the tensor cores read for element (mn, k) (k < 16) of one instruction's 16-bit operand
// (128-byte swizzle mode, base offset 0: DescriptorFields checks the kernels' descriptors).
// K-major: each mn-row holds k contiguously; 8 rows of 128 bytes make an atom, atoms SBO apart.
uint32_t read_k_major(uint64_t desc, int mn, int k) {
  const Desc d = decode(desc);
  return swizzle128(d.start + uint32_t(mn / 8) * d.sbo + uint32_t(mn % 8) * 128 + uint32_t(k) * 2);
}
// MN-major: each k-row holds 64 mn-elements contiguously (128 bytes); 8 k-rows make an atom, the
// next 8 k-rows SBO on, the next 64 mn-elements LBO on.
uint32_t read_mn_major(uint64_t desc, int mn, int k) {
  const Desc d = decode(desc);
  return swizzle128(d.start + uint32_t(mn / 64) * d.lbo + uint32_t(k / 8) * d.sbo +
                    uint32_t(k % 8) * 128 + uint32_t(mn % 64) * 2);
}
// Fragment ownership, thread t of the warpgroup (PTX figures "WGMMA .m64nNk16 register fragment
// layout"): accumulator register i → (row, col); A register i, half h → (row, col).
int acc_row(int t, int i) {
  return 16 * (t / 32) + (t % 32) / 4 + ((i % 4) >= 2 ? 8 : 0);
}
int acc_col(int t, int i) {
  return (i / 4) * 8 + (t % 4) * 2 + (i % 2);
}
int a_row(int t, int i) {
  return 16 * (t / 32) + (t % 32) / 4 + (i % 2 == 1 ? 8 : 0);
}
int a_col(int t, int i, int h) {
  return (t % 4) * 2 + (i >= 2 ? 8 : 0) + h;
}

// ---- The generic pieces ------------------------------------------------------------------------

TEST(WgmmaLayout, DescriptorFields) {
  for (uint32_t addr : {0u, 1024u, 0x12340u, 227u * 1024 - 16}) {
    const Desc k = decode(cuda::wgmma_desc_k(addr));
    EXPECT_EQ(k.start, addr);
    EXPECT_EQ(k.sbo, 1024u);
    EXPECT_EQ(k.mode, 1u);
    EXPECT_EQ(k.base_offset, 0u);
    const Desc mn = decode(cuda::wgmma_desc_mn(addr, 8192));
    EXPECT_EQ(mn.start, addr);
    EXPECT_EQ(mn.lbo, 8192u);
    EXPECT_EQ(mn.sbo, 1024u);
    EXPECT_EQ(mn.mode, 1u);
  }
  // Steps added to a descriptor move its start address only (no carry into other fields).
  for (uint32_t addr : {0u, 1024u, 100u * 1024})
    for (uint32_t step : {32u, 96u, 2048u, 8192u + 96})
      EXPECT_EQ(cuda::wgmma_desc_k(addr) + (step >> 4), cuda::wgmma_desc_k(addr + step));
}

TEST(WgmmaLayout, FragmentMaps) {
  for (int t = 0; t < 128; ++t) {
    for (int i = 0; i < 128; ++i) {
      EXPECT_EQ(cuda::wgmma_acc_row(t, i), acc_row(t, i)) << t << " " << i;
      EXPECT_EQ(cuda::wgmma_acc_col(t, i), acc_col(t, i)) << t << " " << i;
    }
    for (int i = 0; i < 4; ++i)
      for (int h = 0; h < 2; ++h) {
        EXPECT_EQ(cuda::wgmma_a_row(t, i), a_row(t, i));
        EXPECT_EQ(cuda::wgmma_a_col(t, i, h), a_col(t, i, h));
        // An accumulator pair as A: the same row, the k-step's columns.
        for (int kk = 0; kk < 4; ++kk) {
          const int reg = cuda::wgmma_acc_for_a(kk, i) + h;
          EXPECT_EQ(acc_row(t, reg), a_row(t, i)) << t << " " << kk << " " << i;
          EXPECT_EQ(acc_col(t, reg), 16 * kk + a_col(t, i, h)) << t << " " << kk << " " << i;
        }
      }
  }
  // Every (row, col) of a 64 × 64 accumulator has exactly one owner.
  std::set<std::pair<int, int>> seen;
  for (int t = 0; t < 128; ++t)
    for (int i = 0; i < 32; ++i) seen.insert({acc_row(t, i), acc_col(t, i)});
  EXPECT_EQ(seen.size(), size_t(64 * 64));
}

// The prefill GEMM's shared tiles ([rows, 64] fp16, sw128_offset, descriptor + 32 bytes a k16
// step: prefill/gemm_tile.cuh) run correctly on the H200, so the emulation's K-major rule must reproduce
// them: this anchors the emulation to hardware.
TEST(WgmmaLayout, EmulationMatchesTheGemmTiles) {
  const uint32_t tile = 3 * 1024;
  for (int kk = 0; kk < 4; ++kk)
    for (int m = 0; m < 128; ++m)
      for (int k = 0; k < 16; ++k) {
        const int col = 16 * kk + k;
        EXPECT_EQ(read_k_major(cuda::wgmma_desc_k(tile + 32 * kk), m, k),
                  tile + cuda::sw128_offset(m, col / 8) + (col % 8) * 2);
      }
}

// The warp-specialised GEMM's B tile (prefill/gemm_ws.cuh): 136 rows, the codes in rows 0 … 127 as the
// producer stores them (thread t: row t, chunk c at sw128_offset(t, c)) and 8 rows of ones after
// them; m64n136k16 reads row n of its k16 step where the kernel stored it, and its accumulator
// registers 64 … 67 are columns 128 … 135 (the row sums) of rows wgmma_frag_row(t, 0 | 1).
TEST(WgmmaLayout, WarpSpecialisedGemmTile) {
  const uint32_t tile = 32 * 1024;  // a stage's B tile, after A_hi and A_lo
  for (int kk = 0; kk < 4; ++kk)
    for (int n = 0; n < 136; ++n)
      for (int k = 0; k < 16; ++k) {
        const int col = 16 * kk + k;
        ASSERT_EQ(read_k_major(cuda::wgmma_desc_k(tile + 32 * kk), n, k),
                  tile + cuda::sw128_offset(n, col / 8) + (col % 8) * 2)
            << "k-step " << kk << " row " << n << " k " << k;
      }
  // The ones: item i of the start-up loop at row 128 + i / 8, chunk i % 8 (bytes [16384, 17408)).
  std::set<uint32_t> ones;
  for (int i = 0; i < 64; ++i) ones.insert((128 + i / 8) * 128 + i % 8 * 16);
  EXPECT_EQ(ones.size(), 64u);
  EXPECT_EQ(*ones.begin(), 128u * 128);
  EXPECT_EQ(*ones.rbegin(), 136u * 128 - 16);
  // The producer's code stores and A copies (thread t: row t / 8 + 16p, chunk t % 8): 8
  // consecutive threads write 8 different 16-byte bank groups.
  for (int t0 = 0; t0 < 128; t0 += 8)
    for (int c = 0; c < 8; ++c) {
      std::set<uint32_t> codes, a;
      for (int t = t0; t < t0 + 8; ++t) {
        codes.insert(cuda::sw128_offset(t, c) % 128 / 16);
        a.insert(cuda::sw128_offset(t / 8 + 16 * c, t % 8) % 128 / 16);
      }
      EXPECT_EQ(codes.size(), 8u);
      EXPECT_EQ(a.size(), 8u);
    }
  for (int t = 0; t < 128; ++t)
    for (int h = 0; h < 2; ++h)
      for (int e = 0; e < 2; ++e) {
        EXPECT_EQ(acc_row(t, 64 + 2 * h + e), cuda::wgmma_frag_row(t, h));
        EXPECT_GE(acc_col(t, 64 + 2 * h + e), 128);
        EXPECT_LT(acc_col(t, 64 + 2 * h + e), 136);
      }
}

// ---- The attention tile ------------------------------------------------------------------------

template <int HD>
void check_tile_map() {
  using L = cuda::AttnWgmmaTile<HD>;
  SCOPED_TRACE(HD);
  // Regions: 1024-aligned tiles, in order, barriers after them, all within the shared memory.
  std::vector<std::pair<uint32_t, uint32_t>> regions;
  for (int w = 0; w < L::kConsumers; ++w) regions.push_back({L::q_tile(w), L::kQBytes});
  for (int s = 0; s < L::kStages; ++s) regions.push_back({L::k_tile(s), L::kKvBytes});
  for (int s = 0; s < L::kStages; ++s) regions.push_back({L::v_tile(s), L::kKvBytes});
  regions.push_back({L::kBarrierOffset, uint32_t(L::kBarriers * L::kStages * 8)});
  for (size_t i = 0; i < regions.size(); ++i) {
    if (i + 1 < regions.size()) {
      EXPECT_EQ(regions[i].first % 1024, 0u);
      EXPECT_EQ(regions[i].first + regions[i].second, regions[i + 1].first);
    }
  }
  EXPECT_LE(regions.back().first + regions.back().second + 1024, L::kSmem);
  EXPECT_LE(L::kSmem, size_t(227 * 1024));

  // elem() is a bijection of a [rows, HD] tile onto its bytes (2 per element).
  for (int rows : {64, L::kKeys}) {
    std::vector<int> hits(size_t(rows) * HD * 2, 0);
    for (int r = 0; r < rows; ++r)
      for (int d = 0; d < HD; ++d) {
        const uint32_t b = L::elem(rows, r, d);
        ASSERT_LT(b + 1, hits.size());
        ++hits[b], ++hits[b + 1];
      }
    EXPECT_TRUE(std::all_of(hits.begin(), hits.end(), [](int h) { return h == 1; }));
  }

  // What the tensor cores read under each descriptor is the element the kernel stored there, on
  // a base that is 1024-aligned but not 0 (the swizzle acts on absolute address bits).
  const uint32_t base = 5 * 1024;
  for (int w = 0; w < L::kConsumers; ++w)  // A of S: Q [64 rows, 16 dims] per k-step
    for (int kk = 0; kk < HD / 16; ++kk)
      for (int m = 0; m < 64; ++m)
        for (int k = 0; k < 16; ++k)
          ASSERT_EQ(
              read_k_major(cuda::wgmma_desc_k(base + L::q_tile(w)) + (L::q_step(kk) >> 4), m, k),
              base + L::q_tile(w) + L::elem(64, m, 16 * kk + k))
              << "Q consumer " << w << " k-step " << kk << " row " << m << " k " << k;
  for (int s = 0; s < L::kStages; ++s) {
    for (int kk = 0; kk < HD / 16; ++kk)  // B of S: K [64 keys, 16 dims]
      for (int n = 0; n < L::kKeys; ++n)
        for (int k = 0; k < 16; ++k)
          ASSERT_EQ(
              read_k_major(cuda::wgmma_desc_k(base + L::k_tile(s)) + (L::k_step(kk) >> 4), n, k),
              base + L::k_tile(s) + L::elem(L::kKeys, n, 16 * kk + k))
              << "K stage " << s << " k-step " << kk << " key " << n << " dim " << k;
    for (int kk = 0; kk < L::kKeys / 16; ++kk)  // B of O: V [16 keys, HD dims], MN-major
      for (int n = 0; n < HD; ++n)
        for (int k = 0; k < 16; ++k)
          ASSERT_EQ(
              read_mn_major(
                  cuda::wgmma_desc_mn(base + L::v_tile(s), L::kVLbo) + (L::v_step(kk) >> 4), n, k),
              base + L::v_tile(s) + L::elem(L::kKeys, 16 * kk + k, n))
              << "V stage " << s << " k-step " << kk << " dim " << n << " key " << k;
  }

  // The producer's copies cover the tile once, 16-byte aligned, and each 8 consecutive threads
  // write 8 different 16-byte bank groups.
  std::vector<int> hits(size_t(L::kKeys) * HD / 8, 0);
  for (int t = 0; t < 128; ++t)
    for (int i = 0; i < L::kPasses; ++i) {
      const int r = L::copy_row(t, i), d = L::copy_dim(t);
      ASSERT_LT(r, L::kKeys);
      ASSERT_EQ(d % 8, 0);
      EXPECT_EQ(L::elem(L::kKeys, r, d) % 16, 0u);
      ++hits[size_t(r) * (HD / 8) + size_t(d / 8)];
    }
  EXPECT_TRUE(std::all_of(hits.begin(), hits.end(), [](int h) { return h == 1; }));
  for (int t0 = 0; t0 < 128; t0 += 8)
    for (int i = 0; i < L::kPasses; ++i) {
      std::set<uint32_t> groups;
      for (int t = t0; t < t0 + 8; ++t)
        groups.insert(L::elem(L::kKeys, L::copy_row(t, i), L::copy_dim(t)) % 128 / 16);
      EXPECT_EQ(groups.size(), 8u) << "threads " << t0 << " … pass " << i;
    }
}

TEST(WgmmaLayout, AttentionTileMap) {
  check_tile_map<64>();
  check_tile_map<128>();
  check_tile_map<256>();
}

// One consumer's pass over one K/V tile, emulated: Q, K and V stored where the kernel stores them
// in a shared-memory image; S = Q·Kᵀ through the descriptors and k-steps the kernel issues, into
// the accumulator registers of the 128 threads; P = f(S) packed to bf16 A fragments with
// wgmma_acc_for_a; O = P·V with A gathered from those fragments by the PTX ownership and V read
// MN-major. O must match the direct product of the same bf16 values (both in double), so a
// layout error anywhere in the chain shows as an O(1) difference.
template <int HD>
void emulate_tile() {
  using L = cuda::AttnWgmmaTile<HD>;
  constexpr int BN = L::kKeys;
  SCOPED_TRACE(HD);
  std::mt19937 rng(HD);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  auto bf = [&](float x) { return bf16_to_f32(f32_to_bf16(x)); };
  std::vector<float> q(size_t(64) * HD), k(size_t(BN) * HD), v(size_t(BN) * HD);
  for (auto* m : {&q, &k, &v})
    for (float& x : *m) x = bf(u(rng));
  const int w = 1, stage = L::kStages - 1;
  std::vector<uint16_t> smem(L::kSmem / 2, 0);
  auto store = [&](uint32_t tile, int rows, const std::vector<float>& m) {
    for (int r = 0; r < rows; ++r)
      for (int d = 0; d < HD; ++d)
        smem[(tile + L::elem(rows, r, d)) / 2] = f32_to_bf16(m[size_t(r) * HD + size_t(d)]);
  };
  store(L::q_tile(w), 64, q);
  store(L::k_tile(stage), BN, k);
  store(L::v_tile(stage), BN, v);
  auto at = [&](uint32_t byte) { return double(bf16_to_f32(smem[byte / 2])); };

  // S in the threads' accumulators, as the kernel's issue_s forms the descriptors.
  std::vector<double> s(size_t(128) * (BN / 2), 0.0);
  const uint64_t qd = cuda::wgmma_desc_k(L::q_tile(w)), kd = cuda::wgmma_desc_k(L::k_tile(stage));
  for (int kk = 0; kk < HD / 16; ++kk)
    for (int t = 0; t < 128; ++t)
      for (int i = 0; i < BN / 2; ++i)
        for (int kx = 0; kx < 16; ++kx)
          s[size_t(t) * (BN / 2) + size_t(i)] +=
              at(read_k_major(qd + (L::q_step(kk) >> 4), acc_row(t, i), kx)) *
              at(read_k_major(kd + (L::k_step(kk) >> 4), acc_col(t, i), kx));
  // P = bf16(some function of S and its position), packed as the kernel packs it.
  auto p_of = [](double sv, int row, int col) {
    return float(std::exp(0.1 * sv) + 0.01 * (row - col));
  };
  std::vector<uint16_t> frag(size_t(128) * (BN / 16) * 4 * 2);  // [t][kk][i][half] bf16
  for (int t = 0; t < 128; ++t)
    for (int kk = 0; kk < BN / 16; ++kk)
      for (int i = 0; i < 4; ++i)
        for (int h = 0; h < 2; ++h) {
          const int reg = cuda::wgmma_acc_for_a(kk, i) + h;
          frag[((size_t(t) * (BN / 16) + size_t(kk)) * 4 + size_t(i)) * 2 + size_t(h)] =
              f32_to_bf16(p_of(s[size_t(t) * (BN / 2) + size_t(reg)], cuda::wgmma_acc_row(t, reg),
                               cuda::wgmma_acc_col(t, reg)));
        }
  // The hardware's view of A: element (row, key) of k-step kk from whichever thread owns it.
  std::vector<double> a(size_t(64) * BN, std::nan(""));
  for (int t = 0; t < 128; ++t)
    for (int kk = 0; kk < BN / 16; ++kk)
      for (int i = 0; i < 4; ++i)
        for (int h = 0; h < 2; ++h)
          a[size_t(a_row(t, i)) * BN + size_t(16 * kk + a_col(t, i, h))] = bf16_to_f32(
              frag[((size_t(t) * (BN / 16) + size_t(kk)) * 4 + size_t(i)) * 2 + size_t(h)]);
  // O = P·V in the threads' accumulators, V through the MN-major descriptor.
  const uint64_t vd = cuda::wgmma_desc_mn(L::v_tile(stage), L::kVLbo);
  std::vector<double> o(size_t(128) * (HD / 2), 0.0);
  for (int kk = 0; kk < BN / 16; ++kk)
    for (int t = 0; t < 128; ++t)
      for (int i = 0; i < HD / 2; ++i)
        for (int kx = 0; kx < 16; ++kx)
          o[size_t(t) * (HD / 2) + size_t(i)] +=
              a[size_t(acc_row(t, i)) * BN + size_t(16 * kk + kx)] *
              at(read_mn_major(vd + (L::v_step(kk) >> 4), acc_col(t, i), kx));

  // The direct computation in (row, key, dim) coordinates.
  std::vector<double> p(size_t(64) * BN);
  for (int row = 0; row < 64; ++row)
    for (int key = 0; key < BN; ++key) {
      double sv = 0;
      for (int d = 0; d < HD; ++d)
        sv += double(q[size_t(row) * HD + size_t(d)]) * k[size_t(key) * HD + size_t(d)];
      p[size_t(row) * BN + size_t(key)] = bf(p_of(sv, row, key));
    }
  int bad = 0;
  for (int t = 0; t < 128; ++t)
    for (int i = 0; i < HD / 2; ++i) {
      const int row = cuda::wgmma_acc_row(t, i), dim = cuda::wgmma_acc_col(t, i);
      double want = 0;
      for (int key = 0; key < BN; ++key)
        want += p[size_t(row) * BN + size_t(key)] * v[size_t(key) * HD + size_t(dim)];
      const double got = o[size_t(t) * (HD / 2) + size_t(i)];
      if (!(std::fabs(got - want) <= 1e-9 * (1 + std::fabs(want))) && bad++ < 5)
        ADD_FAILURE() << "thread " << t << " register " << i << " (row " << row << ", dim " << dim
                      << "): " << got << " vs " << want;
    }
}

TEST(WgmmaLayout, AttentionTileEmulation) {
  emulate_tile<64>();
  emulate_tile<128>();
  emulate_tile<256>();
}

}  // namespace
}  // namespace orchid

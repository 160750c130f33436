// The chunked DeltaNet scan's partition (prefill/delta_net_chunk_tile.h) run on the CPU: one scan block
// of kernel_gdn_chunk_scan emulated warp by warp between its barriers, with mma.sync m16n8k16 and
// ldmatrix (plain and .trans) written from the PTX ISA's fragment rules rather than from the
// header, the tile copies landing either as they are issued or only at the wait that covers them,
// and shared memory that no copy or warp wrote reading as NaN. O and S after several chunks are
// held to a double-precision run of the same recurrence on the same tiles, so a wrong warp role,
// ldmatrix address, fragment register, hand-on slot or copy order fails here before a GPU run.
// The emulation mirrors the kernel phase for phase: a change to one needs the same change here.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "orchid/backend/cuda/prefill/delta_net_chunk_tile.h"
#include "orchid/util/bf16.h"

namespace orchid {
namespace {

using namespace cuda::gdn_chunk;

constexpr int kRowH = kHd + 8, kRowP = kChunk + 8;  // the kernel's padded shared rows
constexpr uint16_t kNanBf16 = 0x7fc0;

// ---- PTX rules (lane l = 4 g + q)
// -----------------------------------------------------------------

using Reg4 = std::array<uint32_t, 4>;  // a lane's A fragment or ldmatrix.x4 result
using Acc = std::array<float, 4>;      // a lane's m16n8 accumulator

float lo_half(uint32_t r) {
  return bf16_to_f32(uint16_t(r & 0xffff));
}
float hi_half(uint32_t r) {
  return bf16_to_f32(uint16_t(r >> 16));
}
uint32_t pack(uint16_t lo, uint16_t hi) {
  return uint32_t(lo) | uint32_t(hi) << 16;
}

// ldmatrix.sync.aligned.m8n8.x4(.trans).b16: matrix i's 8 rows start at the addresses lanes 8 i …
// 8 i + 7 give; plain, lane l receives row g, elements 2 q and 2 q + 1 of matrix i in register i;
// .trans, elements (row 2 q, column g) and (row 2 q + 1, column g).
std::array<Reg4, 32> ldmatrix(const uint16_t* tile, int pitch, const int (&row)[32],
                              const int (&col)[32], bool trans) {
  std::array<Reg4, 32> r{};
  for (int l = 0; l < 32; ++l)
    for (int i = 0; i < 4; ++i) {
      const int g = l / 4, q = l % 4;
      auto at = [&](int mr, int mc) {
        const int src = 8 * i + mr;
        return tile[row[src] * pitch + col[src] + mc];
      };
      r[size_t(l)][size_t(i)] =
          trans ? pack(at(2 * q, g), at(2 * q + 1, g)) : pack(at(g, 2 * q), at(g, 2 * q + 1));
    }
  return r;
}

// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32, d += a · b: a0 = A[g][2q, 2q+1],
// a1 = A[g+8][…], a2 = A[g][2q+8, 2q+9], a3 = A[g+8][…]; b0 = B[2q, 2q+1][g], b1 = B[2q+8,
// 2q+9][g]; d0, d1 = D[g][2q, 2q+1], d2, d3 = D[g+8][…]. Products exact, sums in double (the tensor
// cores' fp32 sums round differently, by far less than the tests' bounds).
void mma(std::array<Acc, 32>& d, const std::array<Reg4, 32>& a, const std::array<Reg4, 32>& b,
         int b0) {
  double A[16][16], B[16][8];
  for (int l = 0; l < 32; ++l) {
    const int g = l / 4, q = l % 4;
    for (int i = 0; i < 4; ++i) {
      const uint32_t x = a[size_t(l)][size_t(i)];
      A[g + 8 * (i & 1)][2 * q + 8 * (i >> 1)] = lo_half(x);
      A[g + 8 * (i & 1)][2 * q + 8 * (i >> 1) + 1] = hi_half(x);
    }
    for (int i = 0; i < 2; ++i) {
      const uint32_t x = b[size_t(l)][size_t(b0 + i)];
      B[2 * q + 8 * i][g] = lo_half(x);
      B[2 * q + 8 * i + 1][g] = hi_half(x);
    }
  }
  for (int l = 0; l < 32; ++l)
    for (int e = 0; e < 4; ++e) {
      const int r = l / 4 + 8 * (e >> 1), c = 2 * (l % 4) + (e & 1);
      double s = d[size_t(l)][size_t(e)];
      for (int k = 0; k < 16; ++k) s += A[r][k] * B[k][c];
      d[size_t(l)][size_t(e)] = float(s);
    }
}

// ---- The kernel's device helpers, on the host
// ----------------------------------------------------

// split_bf16x2: hi = bf16(x), lo = bf16(x − hi), x0 in the low halves.
void split2(float x0, float x1, uint32_t& hi, uint32_t& lo) {
  const uint16_t h0 = f32_to_bf16(x0), h1 = f32_to_bf16(x1);
  hi = pack(h0, h1);
  lo = pack(f32_to_bf16(x0 - bf16_to_f32(h0)), f32_to_bf16(x1 - bf16_to_f32(h1)));
}
// split_frag: two accumulator tiles side by side as an A fragment, hi and lo.
void split_frag(const Acc& t0, const Acc& t1, Reg4& hi, Reg4& lo) {
  split2(t0[0], t0[1], hi[0], lo[0]);
  split2(t0[2], t0[3], hi[1], lo[1]);
  split2(t1[0], t1[1], hi[2], lo[2]);
  split2(t1[2], t1[3], hi[3], lo[3]);
}
using Pair = std::array<std::array<Acc, 32>, 2>;  // d[2][4] of mma_n16, for all lanes
void mma_n16(Pair& d, const std::array<Reg4, 32>& a, const std::array<Reg4, 32>& b) {
  mma(d[0], a, b, 0);
  mma(d[1], a, b, 2);
}

// ---- One scan block
// --------------------------------------------------------------------------------

// The scratch tiles of one value head (and its key head) for every chunk, as the prep writes
// them; P's 16 × 16 blocks right of the diagonal hold NaN (never written there).
struct Tiles {
  int n = 0;
  std::vector<uint16_t> w, q, k, pm;  // [chunk][plane][64][128], P [chunk][plane][64][64]
  std::vector<float> u, gate;         // [chunk][64][128], [chunk][64][2]
};

struct Smem {
  std::vector<uint16_t> w, q, k, pm;
  std::vector<float> u, gate;        // [64][kScanCols + 4], [64][2]
  std::vector<Reg4> s_frag, v_frag;  // [slot][lane]
  Smem()
      : w(2 * kChunk * kRowH, kNanBf16),
        q(w),
        k(w),
        pm(2 * kChunk * kRowP, kNanBf16),
        u(kChunk * (kScanCols + 4), NAN),
        gate(2 * kChunk, NAN),
        s_frag(kSSlots * 32, Reg4{pack(kNanBf16, kNanBf16)}),
        v_frag(kVSlots * 32, Reg4{pack(kNanBf16, kNanBf16)}) {}
};

// The copies the kernel issues: load_w_q_u (group 1) and load_p_k (group 2) of chunk c.
void copy_w_q_u(Smem& sm, const Tiles& t, int c, int c0) {
  for (int plane = 0; plane < 2; ++plane)
    for (int r = 0; r < kChunk; ++r)
      for (int d = 0; d < kHd; ++d) {
        const size_t src = ((size_t(c) * 2 + plane) * kChunk + r) * kHd + d;
        sm.w[size_t((plane * kChunk + r) * kRowH + d)] = t.w[src];
        sm.q[size_t((plane * kChunk + r) * kRowH + d)] = t.q[src];
      }
  for (int r = 0; r < kChunk; ++r) {
    for (int col = 0; col < kScanCols; ++col)
      sm.u[size_t(r * (kScanCols + 4) + col)] = t.u[(size_t(c) * kChunk + r) * kHd + c0 + col];
    for (int h = 0; h < 2; ++h)
      sm.gate[size_t(2 * r + h)] = t.gate[(size_t(c) * kChunk + r) * 2 + h];
  }
}
void copy_p_k(Smem& sm, const Tiles& t, int c) {
  for (int plane = 0; plane < 2; ++plane)
    for (int r = 0; r < kChunk; ++r) {
      for (int s = 0; s < kChunk; ++s)
        if (s / 16 <= r / 16)
          sm.pm[size_t((plane * kChunk + r) * kRowP + s)] =
              t.pm[((size_t(c) * 2 + plane) * kChunk + r) * kChunk + s];
      for (int d = 0; d < kHd; ++d)
        sm.k[size_t((plane * kChunk + r) * kRowH + d)] =
            t.k[((size_t(c) * 2 + plane) * kChunk + r) * kHd + d];
    }
}

struct Warp {
  std::array<Pair, 2> st;  // Sᵀ: st[np][i][lane] is the kernel's st[np][i] of each lane
  Pair vw, oq;
  float e_last = 0;
};

// Lane row/column addresses for ldmatrix, from the header's maps.
void b_addr(int row0, int col0, bool trans, int (&row)[32], int (&col)[32]) {
  for (int l = 0; l < 32; ++l) {
    row[l] = row0 + (trans ? ldm_bt_row(l) : ldm_b_row(l));
    col[l] = col0 + (trans ? ldm_bt_col(l) : ldm_b_col(l));
  }
}

std::array<Reg4, 32> slot(const std::vector<Reg4>& frags, int s) {
  std::array<Reg4, 32> r;
  for (int l = 0; l < 32; ++l) r[size_t(l)] = frags[size_t(s * 32 + l)];
  return r;
}
void put_slot(std::vector<Reg4>& frags, int s, int lane, const Reg4& v) {
  frags[size_t(s * 32 + lane)] = v;
}

void put_s_frags(Smem& sm, const Warp& w, int m, int b) {
  for (int np = 0; np < 2; ++np)
    for (int l = 0; l < 32; ++l) {
      Reg4 hi, lo;
      split_frag(w.st[np][0][size_t(l)], w.st[np][1][size_t(l)], hi, lo);
      put_slot(sm.s_frag, s_slot(m, 2 * b + np, 0), l, hi);
      put_slot(sm.s_frag, s_slot(m, 2 * b + np, 1), l, lo);
    }
}

// kernel_gdn_chunk_scan for block column c0 of a head with dk, dv, T tokens: o [T, dv] (this
// head's columns), S [dk, dv] in and out. land_at_issue: copies complete as issued (else at the
// next wait).
void emulate_block(const Tiles& t, int dk, int dv, int T, int c0, bool land_at_issue,
                   std::vector<float>& o, std::vector<float>& S) {
  Smem sm;
  std::vector<int> pending;  // 1: group 1 of chunk pending_c[i], 2: group 2
  std::vector<int> pending_c;
  auto issue = [&](int group, int c) {
    if (land_at_issue) {
      group == 1 ? copy_w_q_u(sm, t, c, c0) : copy_p_k(sm, t, c);
    } else {
      pending.push_back(group), pending_c.push_back(c);
    }
  };
  auto wait_all = [&] {
    for (size_t i = 0; i < pending.size(); ++i)
      pending[i] == 1 ? copy_w_q_u(sm, t, pending_c[i], c0) : copy_p_k(sm, t, pending_c[i]);
    pending.clear(), pending_c.clear();
  };

  std::vector<Warp> warps(kScanWarps);
  // f(register, state row, state column) over warp wi's state accumulators (Sᵀ fragments).
  auto each_state = [&](int wi, auto&& f) {
    const int m = col_tile(wi), b = blk(wi);
    for (int np = 0; np < 2; ++np)
      for (int i = 0; i < 2; ++i)
        for (int l = 0; l < 32; ++l)
          for (int e = 0; e < 4; ++e)
            f(warps[size_t(wi)].st[np][i][size_t(l)][size_t(e)],
              32 * b + 16 * np + 8 * i + acc_col(l, e), 16 * m + acc_row(l, e));
  };
  issue(1, 0);
  for (int wi = 0; wi < kScanWarps; ++wi) {
    each_state(wi, [&](float& r, int row, int col) {
      r = row < dk && c0 + col < dv ? S[size_t(row) * dv + c0 + col] : 0.f;
    });
    put_s_frags(sm, warps[size_t(wi)], col_tile(wi), blk(wi));
  }

  for (int c = 0; c < t.n; ++c) {
    wait_all();
    issue(2, c);
    for (int wi = 0; wi < kScanWarps; ++wi) {  // (1) and (2)
      Warp& w = warps[size_t(wi)];
      const int m = col_tile(wi), b = blk(wi);
      std::array<Pair, 2> vw2{}, oq2{};
      for (int kk = 0; kk < kHd / 16; ++kk) {
        if (16 * kk >= dk) break;
        const auto ah = slot(sm.s_frag, s_slot(m, kk, 0)), al = slot(sm.s_frag, s_slot(m, kk, 1));
        int row[32], col[32];
        b_addr(16 * b, 16 * kk, false, row, col);
        const auto wh = ldmatrix(sm.w.data(), kRowH, row, col, false);
        const auto wl = ldmatrix(sm.w.data() + kChunk * kRowH, kRowH, row, col, false);
        const auto qh = ldmatrix(sm.q.data(), kRowH, row, col, false);
        const auto ql = ldmatrix(sm.q.data() + kChunk * kRowH, kRowH, row, col, false);
        Pair &vw = vw2[size_t(kk & 1)], &oq = oq2[size_t(kk & 1)];
        mma_n16(vw, al, wh);
        mma_n16(oq, al, qh);
        mma_n16(vw, ah, wl);
        mma_n16(oq, ah, ql);
        mma_n16(vw, ah, wh);
        mma_n16(oq, ah, qh);
      }
      for (size_t i = 0; i < 2; ++i)
        for (size_t l = 0; l < 32; ++l)
          for (size_t e = 0; e < 4; ++e) {
            w.vw[i][l][e] = vw2[0][i][l][e] + vw2[1][i][l][e];
            w.oq[i][l][e] = oq2[0][i][l][e] + oq2[1][i][l][e];
          }
      for (int l = 0; l < 32; ++l) {
        Acc sc[2];
        for (int i = 0; i < 2; ++i)
          for (int e = 0; e < 4; ++e) {
            const int r = 16 * b + 8 * i + acc_col(l, e);
            float& v = w.vw[size_t(i)][size_t(l)][size_t(e)];
            v = sm.u[size_t(r * (kScanCols + 4) + 16 * m + acc_row(l, e))] - v;
            sc[i][size_t(e)] = v * sm.gate[size_t(2 * r + 1)];
            w.oq[size_t(i)][size_t(l)][size_t(e)] *= sm.gate[size_t(2 * r)];
          }
        Reg4 hi, lo;
        split_frag(w.vw[0][size_t(l)], w.vw[1][size_t(l)], hi, lo);
        put_slot(sm.v_frag, v_slot(m, b, 0), l, hi);
        put_slot(sm.v_frag, v_slot(m, b, 1), l, lo);
        split_frag(sc[0], sc[1], hi, lo);
        put_slot(sm.v_frag, v_slot(m, b, 2), l, hi);
        put_slot(sm.v_frag, v_slot(m, b, 3), l, lo);
      }
      w.e_last = sm.gate[2 * (kChunk - 1)];
    }
    wait_all();
    if (c + 1 < t.n) issue(1, c + 1);
    for (int wi = 0; wi < kScanWarps; ++wi) {  // (3) and (4)
      Warp& w = warps[size_t(wi)];
      const int m = col_tile(wi), b = blk(wi);
      for (int kb = 0; kb < kTokenBlocks; ++kb) {
        if (kb > b) break;
        const auto ah = slot(sm.v_frag, v_slot(m, kb, 0)), al = slot(sm.v_frag, v_slot(m, kb, 1));
        int row[32], col[32];
        b_addr(16 * b, 16 * kb, false, row, col);
        const auto ph = ldmatrix(sm.pm.data(), kRowP, row, col, false);
        const auto pl = ldmatrix(sm.pm.data() + kChunk * kRowP, kRowP, row, col, false);
        mma_n16(w.oq, al, ph);
        mma_n16(w.oq, ah, pl);
        mma_n16(w.oq, ah, ph);
      }
      for (auto& p : w.st)
        for (auto& lanes : p)
          for (auto& a : lanes)
            for (float& x : a) x *= w.e_last;
      for (int kb = 0; kb < kTokenBlocks; ++kb) {
        const auto ah = slot(sm.v_frag, v_slot(m, kb, 2)), al = slot(sm.v_frag, v_slot(m, kb, 3));
        std::array<std::array<Reg4, 32>, 2> bkh, bkl;
        for (int np = 0; np < 2; ++np) {
          int row[32], col[32];
          b_addr(16 * kb, 32 * b + 16 * np, true, row, col);
          bkh[size_t(np)] = ldmatrix(sm.k.data(), kRowH, row, col, true);
          bkl[size_t(np)] = ldmatrix(sm.k.data() + kChunk * kRowH, kRowH, row, col, true);
        }
        mma_n16(w.st[0], al, bkh[0]);
        mma_n16(w.st[1], al, bkh[1]);
        mma_n16(w.st[0], ah, bkl[0]);
        mma_n16(w.st[1], ah, bkl[1]);
        mma_n16(w.st[0], ah, bkh[0]);
        mma_n16(w.st[1], ah, bkh[1]);
      }
      for (int i = 0; i < 2; ++i)
        for (int l = 0; l < 32; ++l)
          for (int e = 0; e < 4; ++e) {
            const int r = 16 * b + 8 * i + acc_col(l, e), col = 16 * m + acc_row(l, e);
            if (c * kChunk + r < T && c0 + col < dv)
              o[size_t(c * kChunk + r) * dv + c0 + col] = w.oq[size_t(i)][size_t(l)][size_t(e)];
          }
      put_s_frags(sm, w, m, b);
    }
  }
  for (int wi = 0; wi < kScanWarps; ++wi)
    each_state(wi, [&](float& r, int row, int col) {
      if (row < dk && c0 + col < dv) S[size_t(row) * dv + c0 + col] = r;
    });
}

// ---- Inputs and the reference
// ----------------------------------------------------------------------

// Tiles for T tokens of one head: q̂ and k̂ rows of unit length (as the norms leave them), W and U
// of the magnitudes the solve gives, P lower triangular, decays in [0.9, 1); rows past T and
// dims past dk zero, decay 1 there.
Tiles random_tiles(int T, int dk, std::mt19937_64& rng) {
  Tiles t;
  t.n = (T + kChunk - 1) / kChunk;
  const size_t n = size_t(t.n);
  t.w.assign(n * 2 * kChunk * kHd, 0), t.q = t.w, t.k = t.w;
  t.pm.assign(n * 2 * kChunk * kChunk, 0);
  t.u.assign(n * kChunk * kHd, 0.f), t.gate.assign(n * kChunk * 2, 0.f);
  std::uniform_real_distribution<float> uni(-1.f, 1.f), dec(0.9f, 1.f);
  auto put = [&](std::vector<uint16_t>& v, size_t plane0, size_t plane1, float x) {
    const uint16_t hi = f32_to_bf16(x);
    v[plane0] = hi, v[plane1] = f32_to_bf16(x - bf16_to_f32(hi));
  };
  const float unit = 1.f / std::sqrt(float(dk));
  for (size_t c = 0; c < n; ++c) {
    float decay[kChunk], eg[kChunk];
    for (int r = 0; r < kChunk; ++r) {
      const bool live = int(c) * kChunk + r < T;
      decay[r] = live ? dec(rng) : 1.f;
      eg[r] = (r ? eg[r - 1] : 1.f) * decay[r];
      for (int d = 0; d < dk; ++d) {
        const size_t hi = ((c * 2) * kChunk + size_t(r)) * kHd + size_t(d),
                     lo = hi + size_t(kChunk) * kHd;
        if (!live) continue;
        put(t.w, hi, lo, 0.5f * unit * uni(rng));
        put(t.q, hi, lo, unit * uni(rng));
        put(t.k, hi, lo, unit * uni(rng));
      }
      for (int col = 0; col < kHd; ++col)
        t.u[(c * kChunk + size_t(r)) * kHd + size_t(col)] = live ? uni(rng) : 0.f;
    }
    for (int r = 0; r < kChunk; ++r) {
      t.gate[(c * kChunk + size_t(r)) * 2] = eg[r];
      t.gate[(c * kChunk + size_t(r)) * 2 + 1] = eg[kChunk - 1] / eg[r];
      for (int s = 0; s < kChunk; ++s) {
        const size_t hi = ((c * 2) * kChunk + size_t(r)) * kChunk + size_t(s),
                     lo = hi + size_t(kChunk) * kChunk;
        const bool live = int(c) * kChunk + r < T;
        if (s / 16 > r / 16)
          t.pm[hi] = t.pm[lo] = kNanBf16;
        else
          put(t.pm, hi, lo, live && s <= r ? 0.1f * uni(rng) : 0.f);
      }
    }
  }
  return t;
}

// The recurrence on the tiles' values (hi + lo) in double: per chunk V′ = U − W S,
// O = diag(e^γ) Q̂ S + P V′, S ← e^{γ₆₃} S + K̂ᵀ diag(e^{γ₆₃−γ}) V′.
void reference(const Tiles& t, int dk, int dv, int T, std::vector<double>& o,
               std::vector<double>& S) {
  auto val = [](const std::vector<uint16_t>& v, size_t hi, size_t plane) {
    return double(bf16_to_f32(v[hi])) + bf16_to_f32(v[hi + plane]);
  };
  const size_t plane_h = size_t(kChunk) * kHd, plane_p = size_t(kChunk) * kChunk;
  for (int c = 0; c < t.n; ++c) {
    std::vector<double> vp(size_t(kChunk) * dv), qs(size_t(kChunk) * dv);
    for (int r = 0; r < kChunk; ++r)
      for (int col = 0; col < dv; ++col) {
        double ws = 0, q = 0;
        for (int d = 0; d < dk; ++d) {
          const size_t at = ((size_t(c) * 2) * kChunk + size_t(r)) * kHd + size_t(d);
          ws += val(t.w, at, plane_h) * S[size_t(d) * dv + col];
          q += val(t.q, at, plane_h) * S[size_t(d) * dv + col];
        }
        vp[size_t(r) * dv + col] = t.u[(size_t(c) * kChunk + size_t(r)) * kHd + size_t(col)] - ws;
        qs[size_t(r) * dv + col] = q * t.gate[(size_t(c) * kChunk + size_t(r)) * 2];
      }
    for (int r = 0; r < kChunk && c * kChunk + r < T; ++r)
      for (int col = 0; col < dv; ++col) {
        double x = qs[size_t(r) * dv + col];
        for (int s = 0; s <= r; ++s)
          x += val(t.pm, ((size_t(c) * 2) * kChunk + size_t(r)) * kChunk + size_t(s), plane_p) *
               vp[size_t(s) * dv + col];
        o[size_t(c * kChunk + r) * dv + col] = x;
      }
    const double e_last = t.gate[(size_t(c) * kChunk + kChunk - 1) * 2];
    for (int d = 0; d < dk; ++d)
      for (int col = 0; col < dv; ++col) {
        double x = e_last * S[size_t(d) * dv + col];
        for (int r = 0; r < kChunk; ++r)
          x += val(t.k, ((size_t(c) * 2) * kChunk + size_t(r)) * kHd + size_t(d), plane_h) *
               t.gate[(size_t(c) * kChunk + size_t(r)) * 2 + 1] * vp[size_t(r) * dv + col];
        S[size_t(d) * dv + col] = x;
      }
  }
}

double rel_l2(const std::vector<float>& got, const std::vector<double>& want) {
  double e2 = 0, w2 = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double e = double(got[i]) - want[i];
    e2 += e * e, w2 += want[i] * want[i];
  }
  return std::sqrt(e2 / w2);  // NaN anywhere → NaN, which fails every bound
}

// ---- Tests
// -------------------------------------------------------------------------------------------

// Every output element has one owner: O's (token, column) over the warps' (1)-(3) roles, S's
// (row, column) over their (4) roles, and the S slots each filled by the warp that owns the rows.
TEST(DeltaNetChunkTile, EveryElementHasOneOwner) {
  std::set<std::pair<int, int>> o, s;
  for (int w = 0; w < kScanWarps; ++w)
    for (int l = 0; l < 32; ++l)
      for (int e = 0; e < 4; ++e) {
        for (int i = 0; i < 2; ++i)
          EXPECT_TRUE(
              o.insert({16 * blk(w) + 8 * i + acc_col(l, e), 16 * col_tile(w) + acc_row(l, e)})
                  .second);
        for (int nt = 0; nt < 4; ++nt)
          EXPECT_TRUE(
              s.insert({32 * blk(w) + 8 * nt + acc_col(l, e), 16 * col_tile(w) + acc_row(l, e)})
                  .second);
      }
  EXPECT_EQ(o.size(), size_t(kChunk * kScanCols));
  EXPECT_EQ(s.size(), size_t(kHd * kScanCols));
  std::set<int> slots;
  for (int m = 0; m < 2; ++m)
    for (int kk = 0; kk < kHd / 16; ++kk)
      for (int plane = 0; plane < 2; ++plane) slots.insert(s_slot(m, kk, plane));
  EXPECT_EQ(slots.size(), size_t(kSSlots));
  EXPECT_EQ(*slots.rbegin(), kSSlots - 1);
  slots.clear();
  for (int m = 0; m < 2; ++m)
    for (int kb = 0; kb < kTokenBlocks; ++kb)
      for (int which = 0; which < 4; ++which) slots.insert(v_slot(m, kb, which));
  EXPECT_EQ(slots.size(), size_t(kVSlots));
  EXPECT_EQ(*slots.rbegin(), kVSlots - 1);
}

// The emulated scan against the reference: the real head dims and an odd shape (dk 64: the dk
// k-steps stop early; dv 48: the second block's last 16 columns lie past dv), lengths of one
// token, one short of, exactly and one past a chunk, and several chunks with a partial last one;
// from a non-zero state, carried through the launch in the S slots. bf16x3 products lose ~2⁻¹⁷
// a product: o and S within 2e-5 rel. L2; outputs past T or dv untouched.
TEST(DeltaNetChunkTile, EmulatedScanMatchesReference) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<float> uni(-1.f, 1.f);
  for (auto [dk, dv] : {std::pair{128, 128}, std::pair{64, 48}})
    for (int T : {1, 63, 64, 65, 150})
      for (bool land_at_issue : {true, false}) {
        const std::string at = "dk " + std::to_string(dk) + " dv " + std::to_string(dv) + " T " +
                               std::to_string(T) + (land_at_issue ? " (copies land at issue)" : "");
        const Tiles t = random_tiles(T, dk, rng);
        std::vector<float> S0(size_t(dk) * dv);
        for (float& x : S0) x = uni(rng);
        std::vector<float> o(size_t(T + 1) * dv, 12345.f), S = S0;  // one sentinel row past T
        for (int c0 = 0; c0 < dv; c0 += kScanCols)
          emulate_block(t, dk, dv, T, c0, land_at_issue, o, S);
        std::vector<double> want_o(size_t(T) * dv), want_s(S0.begin(), S0.end());
        reference(t, dk, dv, T, want_o, want_s);
        const std::vector<float> got_o(o.begin(), o.begin() + T * dv);
        EXPECT_LE(rel_l2(got_o, want_o), 2e-5) << at << " o";
        EXPECT_LE(rel_l2(S, want_s), 2e-5) << at << " S";
        for (int col = 0; col < dv; ++col) EXPECT_EQ(o[size_t(T) * dv + col], 12345.f) << at;
      }
}

}  // namespace
}  // namespace orchid

// Random quantized / bf16 weight matrices for the CUDA tests: the device layout and the
// dequantized values on the host.
#pragma once

#include <cmath>
#include <random>
#include <vector>

#include "cuda_test_util.h"
#include "orchid/backend/cuda/prefill/prefill_kernels.h"

namespace orchid::test {

// A random matrix in the device layout, with its dequantized values on the host.
struct HostMatrix {
  cuda::DevFormat fmt;
  int rows, cols, group = 64, units;
  std::vector<uint32_t> words;  // [rows, units * 4]
  std::vector<uint32_t> sb;     // [rows, cols / group]
  std::vector<float> w;         // dequantized [rows, cols]

  HostMatrix(cuda::DevFormat f, int r, int c, std::mt19937_64& rng) : fmt(f), rows(r), cols(c) {
    const int E = cuda::unit_elems(f);
    units = (c + E - 1) / E;
    words.assign(size_t(r) * units * 4, 0u);
    w.assign(size_t(r) * c, 0.f);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    if (f == cuda::DevFormat::bf16) {
      for (int i = 0; i < r; ++i)
        for (int j = 0; j < c; ++j) {
          const uint16_t b = f32_to_bf16(u(rng) * 0.1f);
          w[size_t(i) * c + j] = bf16_to_f32(b);
          words[size_t(i) * units * 4 + j / 2] |= uint32_t(b) << (16 * (j % 2));
        }
      return;
    }
    const int bits = f == cuda::DevFormat::q4 ? 4 : 8, per = 32 / bits;
    const int groups = c / group;
    sb.resize(size_t(r) * groups);
    for (auto& p : sb) p = test::bf16_pair(u(rng) * 0.02f, u(rng) * 0.1f);
    for (int i = 0; i < r; ++i)
      for (int j = 0; j < c; ++j) {
        const uint32_t q = uint32_t(rng() % (1u << bits));
        words[size_t(i) * units * 4 + j / per] |= q << (bits * (j % per));
        const uint32_t p = sb[size_t(i) * groups + j / group];
        w[size_t(i) * c + j] = bf16_to_f32(uint16_t(p)) * float(q) + bf16_to_f32(uint16_t(p >> 16));
      }
  }
};

// |scale · code| of element (r, c) of a q4 / q8 matrix: what a dp4a kernel multiplies by its
// quantised input (the bias term uses the exact input sum).
inline double scaled_code(const HostMatrix& h, int r, int c) {
  const int bits = h.fmt == cuda::DevFormat::q4 ? 4 : 8, per = 32 / bits;
  const uint32_t q =
      (h.words[size_t(r) * h.units * 4 + c / per] >> (bits * (c % per))) & ((1u << bits) - 1u);
  const uint32_t p = h.sb[size_t(r) * (h.cols / h.group) + c / h.group];
  return std::fabs(double(bf16_to_f32(uint16_t(p))) * double(q));
}

// The dp4a kernels' worst case for row r (decode/dp4a_q4.cuh): each input off by at most its group's
// largest |x̂| / 64,516 (gmax: per element, test::group_max_abs), so the dot product by
// Σ_c |scale · code_c| · gmax(c) / 64,516.
inline double dp4a_bound(const HostMatrix& h, int r, const std::vector<double>& gmax) {
  double b = 0;
  for (int c = 0; c < h.cols; ++c) b += scaled_code(h, r, c) * gmax[size_t(c)];
  return b / 64516.0;
}

struct DeviceMatrix {
  DevBuf<uint32_t> words, sb;
  cuda::DevMatrix m;
  explicit DeviceMatrix(const HostMatrix& h)
      : words(h.words), sb(h.sb.empty() ? std::vector<uint32_t>{0u} : h.sb) {
    m.w = words.get(), m.sb = sb.get(), m.rows = h.rows, m.cols = h.cols, m.units = h.units;
    m.group = h.group, m.fmt = h.fmt;
    const Status st = cuda::set_scaled_code_exp(m, nullptr);
    EXPECT_TRUE(st.ok()) << st.message();
  }
};

}  // namespace orchid::test

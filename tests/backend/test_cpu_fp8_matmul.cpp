// The CPU fast path's FP8 matmul (backend/cpu/fp8_matmul.h) against the exact path (each row
// dequantized to fp32 by QuantMatrix::dequant_row, fp32 dot) on fresh random block-FP8 matrices:
// every e4m3 code but NaN (subnormals included), bf16 / f32 / f16 scales, partial edge blocks
// (176 columns over blocks of 128; 300 rows over blocks of 128), row slices starting inside a
// block, 1 to 9 activation rows (the decode and prefill loops). Both sum exact products of the
// same weights in fp32, in different orders: |y − exact| ≤ 1e-5 · Σ |w · x| + 1e-30.
#include <gtest/gtest.h>
#include <immintrin.h>

#include <cmath>
#include <random>
#include <vector>

#include "orchid/backend/cpu/fp8_matmul.h"
#include "orchid/backend/cpu/isa.h"
#include "orchid/backend/cpu/ops.h"
#include "orchid/util/bf16.h"
#include "orchid/util/fp8.h"

namespace orchid::cpu {
namespace {

struct Fp8Case {
  int64_t rows, cols;
  int block_rows, block_cols;
  DType scale_type;
};

TEST(CpuFp8Matmul, MatchesTheExactPath) {
  const CpuIsa isa = detected_isa();
  std::mt19937 rng(std::random_device{}());
  for (const Fp8Case& cs : {Fp8Case{37, 256, 128, 128, DType::BF16}, Fp8Case{300, 176, 128, 128, DType::F32},
                            Fp8Case{129, 512, 128, 64, DType::F16}, Fp8Case{8, 2048, 128, 128, DType::BF16}}) {
    const int64_t sr = (cs.rows + cs.block_rows - 1) / cs.block_rows;
    const int64_t sc = (cs.cols + cs.block_cols - 1) / cs.block_cols;
    std::vector<uint8_t> codes(size_t(cs.rows * cs.cols));
    std::uniform_int_distribution<int> code(0, 255);
    for (auto& c : codes) {
      int v = code(rng);
      if ((v & 0x7f) == 0x7f) v &= 0xfe;  // not NaN
      c = uint8_t(v);
    }
    std::uniform_real_distribution<float> scale(1e-4f, 2e-2f);
    std::vector<uint16_t> s16(size_t(sr * sc));
    std::vector<float> s32(size_t(sr * sc));
    for (size_t i = 0; i < s32.size(); ++i) {
      s32[i] = scale(rng);
      s16[i] = cs.scale_type == DType::F16 ? uint16_t(_cvtss_sh(s32[i], 0)) : f32_to_bf16(s32[i]);
    }
    QuantMatrix W;
    W.rows = cs.rows, W.cols = cs.cols, W.format = WeightFormat::fp8, W.dtype = cs.scale_type;
    W.bits = 8, W.group = cs.block_cols, W.block_rows = cs.block_rows, W.data = codes.data();
    W.scales = cs.scale_type == DType::F32 ? static_cast<const void*>(s32.data()) : s16.data();
    if (!fp8_supported(W, isa)) GTEST_SKIP() << "no AVX-512 here: the exact path runs FP8";
    for (auto [r0, n_rows] : {std::pair<int64_t, int64_t>{0, cs.rows}, {cs.rows / 3, cs.rows - cs.rows / 3}}) {
      const QuantMatrix M = W.row_slice(r0, n_rows);
      for (int64_t n : {1, 3, 4, 9}) {
        std::normal_distribution<float> g(0.f, 1.f);
        std::vector<float> X(size_t(n * cs.cols));
        for (auto& x : X) x = g(rng);
        std::vector<float> got(size_t(n * n_rows)), want(got.size()), w(static_cast<size_t>(cs.cols));
        fp8_matmul(M, X.data(), n, got.data());
        Matmul{false, CpuIsa::scalar}(M, X.data(), n, want.data());
        for (int64_t r = 0; r < n_rows; ++r) {
          M.dequant_row(r, w.data());
          for (int64_t t = 0; t < n; ++t) {
            double mag = 0;
            for (int64_t c = 0; c < cs.cols; ++c) mag += std::fabs(double(w[size_t(c)]) * X[size_t(t * cs.cols + c)]);
            const float a = got[size_t(t * n_rows + r)], b = want[size_t(t * n_rows + r)];
            ASSERT_LE(std::fabs(double(a) - b), 1e-5 * mag + 1e-30)
                << cs.rows << "x" << cs.cols << " slice " << r0 << " n " << n << " row " << r
                << " token " << t << ": " << a << " vs " << b;
          }
        }
      }
    }
  }
}

// Dense bf16 / f16 matrices (an FP8 checkpoint's lm_head, an HF bf16 checkpoint) take the same
// tiles with the widened elements: the same bound against the exact path.
TEST(CpuFp8Matmul, DenseBf16AndF16MatchTheExactPath) {
  std::mt19937 rng(std::random_device{}());
  std::normal_distribution<float> g(0.f, 1.f);
  for (DType t : {DType::BF16, DType::F16}) {
    const int64_t rows = 45, cols = 336;
    std::vector<uint16_t> w(size_t(rows * cols));
    for (auto& e : w) e = t == DType::F16 ? uint16_t(_cvtss_sh(g(rng), 0)) : f32_to_bf16(g(rng));
    QuantMatrix W;
    W.rows = rows, W.cols = cols, W.format = WeightFormat::dense, W.dtype = t, W.bits = 16;
    W.data = w.data();
    if (!fp8_supported(W, detected_isa())) GTEST_SKIP() << "no AVX-512 here";
    for (int64_t n : {1, 5, 8}) {
      std::vector<float> X(size_t(n * cols));
      for (auto& x : X) x = g(rng);
      std::vector<float> got(size_t(n * rows)), want(got.size()), row(static_cast<size_t>(cols));
      fp8_matmul(W, X.data(), n, got.data());
      Matmul{false, CpuIsa::scalar}(W, X.data(), n, want.data());
      for (int64_t r = 0; r < rows; ++r) {
        W.dequant_row(r, row.data());
        for (int64_t k = 0; k < n; ++k) {
          double mag = 0;
          for (int64_t c = 0; c < cols; ++c) mag += std::fabs(double(row[size_t(c)]) * X[size_t(k * cols + c)]);
          ASSERT_LE(std::fabs(double(got[size_t(k * rows + r)]) - want[size_t(k * rows + r)]), 1e-5 * mag)
              << (t == DType::F16 ? "f16" : "bf16") << " row " << r << " token " << k;
        }
      }
    }
  }
}

// The fast Matmul sends FP8 matrices to the kernel (and its result is the kernel's).
TEST(CpuFp8Matmul, TheFastMatmulTakesFp8) {
  std::vector<uint8_t> codes(64 * 128);
  for (size_t i = 0; i < codes.size(); ++i) codes[i] = uint8_t((i * 29 + 3) % 126);
  const uint16_t s = f32_to_bf16(0.01f);
  QuantMatrix W;
  W.rows = 64, W.cols = 128, W.format = WeightFormat::fp8, W.dtype = DType::BF16, W.bits = 8;
  W.group = 128, W.block_rows = 128, W.data = codes.data(), W.scales = &s;
  const CpuIsa isa = detected_isa();
  if (!fp8_supported(W, isa)) GTEST_SKIP() << "no AVX-512 here";
  std::vector<float> X(128, 0.5f), a(64), b(64);
  Matmul{true, isa}(W, X.data(), 1, a.data());
  fp8_matmul(W, X.data(), 1, b.data());
  EXPECT_EQ(a, b);
  EXPECT_FALSE(fp8_supported(W, CpuIsa::avx2));
}

}  // namespace
}  // namespace orchid::cpu

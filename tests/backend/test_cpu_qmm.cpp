// The CPU fast matmul's kernels (backend/cpu/qmm_*.cpp) on fresh random inputs: each SIMD path
// this machine runs against the scalar kernel (the same integer arithmetic: rel. L2 ≤ 1e-5,
// only the float summation order differs), and the scalar kernel against the exact fp32
// product of the dequantized weights within the int8 rounding's hard bound: an activation is
// off by at most half its block's step d, so |y − exact| ≤ Σ |w| d / 2 (plus float rounding).
// Shapes: odd row counts, 64 to 320
// columns, groups 16 / 32 / 64 / 128, 4- and 8-bit codes, f32 / bf16 / f16 scales, 1 to 6
// activation rows (the decode and the prefill loops).
#include <gtest/gtest.h>
#include <immintrin.h>

#include <cmath>
#include <random>
#include <vector>

#include "orchid/backend/cpu/isa.h"
#include "orchid/backend/cpu/qmatmul.h"
#include "orchid/util/bf16.h"

namespace orchid::cpu {
namespace {

uint16_t to_f16(float f) {
  return uint16_t(_cvtss_sh(f, 0));  // F16C: every build targets it (CMakeLists.txt)
}

struct RandomMatrix {
  int64_t rows, cols;
  int bits, group;
  ScaleType st;
  std::vector<uint8_t> codes;
  std::vector<uint16_t> s16, b16;
  std::vector<float> s32, b32;
  QmmWeights view() const {
    QmmWeights w;
    w.rows = rows, w.cols = cols, w.bits = bits, w.group = group, w.scale_type = st;
    w.codes = codes.data();
    w.scales = st == ScaleType::f32 ? static_cast<const void*>(s32.data()) : s16.data();
    w.biases = st == ScaleType::f32 ? static_cast<const void*>(b32.data()) : b16.data();
    return w;
  }
  // Dequantized row r, as the exact path sees it.
  std::vector<float> row(int64_t r) const {
    std::vector<float> out(static_cast<size_t>(cols));
    const QmmWeights w = view();
    const int64_t ng = cols / group;
    for (int64_t c = 0; c < cols; ++c) {
      const uint8_t* p = codes.data() + r * cols * bits / 8;
      const int code = bits == 4 ? (p[c / 2] >> ((c % 2) * 4)) & 0xF : p[c];
      out[size_t(c)] = qmm_scale_value(w.scales, st, r * ng + c / group) * float(code) +
                       qmm_scale_value(w.biases, st, r * ng + c / group);
    }
    return out;
  }
};

RandomMatrix random_matrix(std::mt19937& rng, int64_t rows, int64_t cols, int bits, int group,
                           ScaleType st) {
  RandomMatrix m{rows, cols, bits, group, st, {}, {}, {}, {}, {}};
  std::uniform_int_distribution<int> byte(0, 255);
  m.codes.resize(size_t(rows * cols * bits / 8));
  for (auto& c : m.codes) c = uint8_t(byte(rng));
  std::normal_distribution<float> nd(0.f, 1.f);
  const int64_t n = rows * (cols / group);
  for (int64_t i = 0; i < n; ++i) {
    const float s = 0.02f * (1.f + std::fabs(nd(rng))), b = -s * (bits == 4 ? 8.f : 128.f);
    m.s32.push_back(s), m.b32.push_back(b + 0.01f * nd(rng));
    m.s16.push_back(st == ScaleType::bf16 ? f32_to_bf16(s) : to_f16(s));
    m.b16.push_back(st == ScaleType::bf16 ? f32_to_bf16(m.b32.back()) : to_f16(m.b32.back()));
  }
  return m;
}

std::vector<float> random_acts(std::mt19937& rng, int64_t n, int64_t cols) {
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> x(size_t(n * cols));
  for (auto& v : x) v = nd(rng);
  x[size_t(cols / 3)] = 9.f;  // an outlier, as activations have
  return x;
}

double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / den);
}

std::vector<CpuIsa> runnable_simd() {
  std::vector<CpuIsa> out;
  if (int(detected_isa()) >= int(CpuIsa::avx2)) out.push_back(CpuIsa::avx2);
  if (int(detected_isa()) >= int(CpuIsa::avx512_vnni)) out.push_back(CpuIsa::avx512_vnni);
  return out;
}

// One shape: the scalar kernel within the rounding bound of the exact product, each SIMD path
// within 1e-5 of the scalar one.
void check_shape(std::mt19937& rng, int bits, int group, ScaleType st, int64_t n, int64_t cols,
                 int64_t rows) {
  const RandomMatrix m = random_matrix(rng, rows, cols, bits, group, st);
  const std::vector<float> x = random_acts(rng, n, cols);
  QuantizedActs acts;
  acts.quantize(x.data(), n, cols);
  const QmmActs a = acts.view(group);
  const QmmWeights w = m.view();

  std::vector<float> ref(size_t(n * rows)), exact(size_t(n * rows));
  std::vector<double> bound(size_t(n * rows));
  qmm_scalar(w, a, 0, rows, ref.data(), rows);
  for (int64_t r = 0; r < rows; ++r) {
    const std::vector<float> wr = m.row(r);
    for (int64_t t = 0; t < n; ++t) {
      double s = 0, rounding = 0, magnitude = 0;
      for (int64_t c = 0; c < cols; ++c) {
        const double wx = double(wr[size_t(c)]) * x[size_t(t * cols + c)];
        s += wx, magnitude += std::fabs(wx);
        rounding += std::fabs(wr[size_t(c)]) * a.d[t * (cols / 64) + c / 64] / 2;
      }
      exact[size_t(t * rows + r)] = float(s);
      bound[size_t(t * rows + r)] = rounding * (1 + 1e-4) + 1e-5 * magnitude;
    }
  }
  const std::string what = "bits " + std::to_string(bits) + " group " + std::to_string(group) +
                           " scales " + std::to_string(int(st)) + " n " + std::to_string(n) +
                           " cols " + std::to_string(cols);
  for (size_t i = 0; i < ref.size(); ++i)
    ASSERT_LE(std::fabs(double(ref[i]) - exact[i]), bound[i]) << what << ", output " << i;
  for (CpuIsa isa : runnable_simd()) {
    std::vector<float> y(size_t(n * rows), NAN);
    // Two calls over a split of the rows, as the thread pool hands them out.
    qmm_kernel(isa)(w, a, 0, 16, y.data(), rows);
    qmm_kernel(isa)(w, a, 16, rows, y.data(), rows);
    EXPECT_LE(rel_l2(y, ref), 1e-5) << isa_name(isa) << ", " << what;
  }
}

TEST(CpuQmm, KernelsMatchTheScalarArithmeticAndTheExactProduct) {
  std::mt19937 rng(20261204);
  int cases = 0;
  for (int bits : {4, 8})
    for (int group : {16, 32, 64, 128})
      for (ScaleType st : {ScaleType::f32, ScaleType::bf16, ScaleType::f16})
        for (int64_t n : {1, 3, 6}) {
          const int64_t cols = group == 128 ? 256 : (n == 3 ? 320 : 64 * (1 + cases % 3));
          check_shape(rng, bits, group, st, n, cols, 37);
          ++cases;
        }
  EXPECT_EQ(cases, 72);
  std::printf("[ qmm ] %d shapes; SIMD paths run here:", cases);
  for (CpuIsa isa : runnable_simd()) std::printf(" %s", std::string(isa_name(isa)).c_str());
  std::printf("\n");
}

// Rows past 1,024 columns take the decode kernels' long-row forms (the AVX-512 nibble planes for
// 4-bit codes, in pairs of 64-column blocks), rows up to it the short-row forms: both, for one
// and several activation rows; an odd count of blocks (1,088 columns) leaves one block unpaired,
// and groups under and over 64 take the planes' other scale forms.
TEST(CpuQmm, LongAndShortRowsOfTheRealShapes) {
  std::mt19937 rng(35);
  for (int bits : {4, 8})
    for (int64_t cols : {512, 1024, 1088, 2048, 4096})
      for (int64_t n : {1, 2}) check_shape(rng, bits, 64, ScaleType::bf16, n, cols, 23);
  for (int group : {16, 32, 128})
    for (int64_t cols : {group == 128 ? 1152 : 1088, 2048})
      for (ScaleType st : {ScaleType::f32, ScaleType::f16})
        check_shape(rng, 4, group, st, 1, cols, 19);
}

// The vectorised quantizer against its definition: int16 = x / d rounded to nearest even, d =
// max|x| / 32767 per 64-column block (one row) or per row (several), even columns of a block
// first; ties (x / d exactly k + 0.5) included.
TEST(CpuQmm, ActivationsQuantizeAsDefined) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.f, 3.f);
  for (int64_t n : {1, 3})
    for (int64_t cols : {64, 192}) {
      std::vector<float> x(size_t(n * cols));
      for (float& v : x) v = nd(rng);
      x[5] = 0.f, x[6] = -x[7];
      QuantizedActs acts;
      acts.quantize(x.data(), n, cols);
      const QmmActs a = acts.view(64);
      for (int64_t t = 0; t < n; ++t) {
        float row_amax = 0.f;
        for (int64_t e = 0; e < cols; ++e)
          row_amax = std::max(row_amax, std::fabs(x[size_t(t * cols + e)]));
        for (int64_t k = 0; k < cols / 64; ++k) {
          const float* xb = x.data() + t * cols + 64 * k;
          float amax = row_amax;
          if (n == 1) {
            amax = 0.f;
            for (int e = 0; e < 64; ++e) amax = std::max(amax, std::fabs(xb[e]));
          }
          ASSERT_EQ(a.d[t * (cols / 64) + k], amax / 32767.f);
          const float inv = 32767.f / amax;
          for (int e = 0; e < 64; ++e)
            ASSERT_EQ(a.q[t * cols + 64 * k + qmm_act_position(e)],
                      int16_t(std::nearbyint(xb[e] * inv)))
                << "row " << t << " column " << 64 * k + e;
        }
      }
    }
  // A tie rounds to even: with max|x| = 32767, x = 2.5 quantizes to 2 and 3.5 to 4.
  std::vector<float> tie(64, 0.f);
  tie[0] = 32767.f, tie[2] = 2.5f, tie[4] = 3.5f, tie[3] = -2.5f;
  QuantizedActs acts;
  acts.quantize(tie.data(), 1, 64);
  const QmmActs a = acts.view(64);
  EXPECT_EQ(a.q[qmm_act_position(2)], 2);
  EXPECT_EQ(a.q[qmm_act_position(4)], 4);
  EXPECT_EQ(a.q[qmm_act_position(3)], -2);
}

TEST(CpuQmm, SupportedShapesAndFallbacks) {
  QuantMatrix m;
  m.format = WeightFormat::affine, m.bits = 4, m.group = 64, m.rows = 8, m.cols = 128;
  m.dtype = DType::BF16;
  EXPECT_TRUE(qmm_supported(m));
  m.cols = 96, m.group = 32;
  EXPECT_FALSE(qmm_supported(m)) << "columns must fill blocks of 64";
  m.cols = 128, m.group = 8;
  EXPECT_FALSE(qmm_supported(m));
  m.group = 64, m.bits = 3;
  EXPECT_FALSE(qmm_supported(m));
  m.bits = 4, m.format = WeightFormat::dense;
  EXPECT_FALSE(qmm_supported(m)) << "dense matrices take the exact path";
}

TEST(CpuQmm, ZeroActivationsGiveZero) {
  std::mt19937 rng(7);
  const RandomMatrix m = random_matrix(rng, 5, 128, 4, 64, ScaleType::bf16);
  std::vector<float> x(128, 0.f), y(5, 1.f);
  QuantizedActs acts;
  acts.quantize(x.data(), 1, 128);
  const QmmActs a = acts.view(64);
  for (CpuIsa isa : {CpuIsa::scalar, CpuIsa::avx2, CpuIsa::avx512_vnni}) {
    if (int(isa) > int(detected_isa())) continue;
    qmm_kernel(isa)(m.view(), a, 0, 5, y.data(), 5);
    for (float v : y) EXPECT_EQ(v, 0.f) << isa_name(isa);
  }
}

}  // namespace
}  // namespace orchid::cpu

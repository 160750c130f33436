// The fast matmul's arithmetic in portable C++: the integer reference the SIMD kernels are
// tested against, and the path of a CPU without AVX2.
#include "orchid/backend/cpu/qmm_kernels.h"

namespace orchid::cpu {

void qmm_scalar(const QmmWeights& W, const QmmActs& X, int64_t r0, int64_t r1, float* Y,
                int64_t ldy) {
  const int64_t cols = W.cols, ng = cols / W.group, nk = cols / 64;
  const int g = W.group;
  float s[kQmmMaxGroups], b[kQmmMaxGroups];
  for (int64_t r = r0; r < r1; ++r) {
    qmm_row_params(W, r, s, b);
    const uint8_t* row = W.codes + r * cols * W.bits / 8;
    for (int64_t t = 0; t < X.n; ++t) {
      const int16_t* q = X.q + t * cols;
      const float* d = X.d + t * nk;
      float acc = 0.f;
      for (int64_t k = 0; k < nk; ++k) {
        // Groups inside block k (a group of >= 64 spans whole blocks).
        const int span = g < 64 ? g : 64;
        for (int e0 = 0; e0 < 64; e0 += span) {
          int32_t isum = 0;
          for (int e = e0; e < e0 + span; ++e) {
            const int64_t col = k * 64 + e;
            const int code = W.bits == 4 ? (row[col / 2] >> ((col % 2) * 4)) & 0xF : row[col];
            isum += code * q[k * 64 + qmm_act_position(e)];
          }
          acc += d[k] * s[(k * 64 + e0) / g] * float(isum);
        }
      }
      const float* xs = X.xsum + t * ng;
      for (int64_t gi = 0; gi < ng; ++gi) acc += b[gi] * xs[gi];
      Y[t * ldy + r] = acc;
    }
  }
}

}  // namespace orchid::cpu

// The CPU backend's fast matmul: activations quantized to int16 once per 64 columns, multiplied
// with a matrix's affine 4- or 8-bit codes as they are stored (no dequantization to fp32), on
// the widest instruction set this CPU has (isa.h). Matrices the kernels do not take (dense, or
// a shape they cannot tile) go to the exact matmul (ops.h).
#pragma once

#include <cstdint>
#include <vector>

#include "orchid/backend/cpu/isa.h"
#include "orchid/backend/cpu/qmm_kernels.h"
#include "orchid/model/weights.h"

namespace orchid::cpu {

// Whether the fast kernels take W: affine 4/8-bit, cols % 64 == 0 and at most kQmmMaxCols,
// group 16, 32 or a multiple of 64, at most kQmmMaxGroups groups a row.
bool qmm_supported(const QuantMatrix& W);

QmmWeights qmm_weights(const QuantMatrix& W);  // PRECONDITION: qmm_supported(W)
QmmKernel qmm_kernel(CpuIsa isa);

// n activation rows quantized for the kernels; the per-layout codes and per-group sums are made
// on first use. Not thread-safe: take views before fanning out.
class QuantizedActs {
 public:
  // PRECONDITION: cols % 64 == 0; X stays valid while views are taken.
  void quantize(const float* X, int64_t n, int64_t cols);
  QmmActs view(int group);
  int64_t rows() const { return n_; }

 private:
  const float* x_ = nullptr;
  int64_t n_ = 0, cols_ = 0;
  std::vector<int16_t> q_;       // QmmActs's order
  std::vector<int16_t> planes_;  // one row: the nibble-plane order (QmmActs::planes)
  std::vector<float> d_;
  std::vector<std::pair<int, std::vector<float>>> sums_;  // (group, [n, cols / group])
};

// Y[t, r] = row r of W · activation row t, for all rows of W, split over the thread pool.
void qmm(const QuantMatrix& W, QuantizedActs& X, float* Y, CpuIsa isa);

}  // namespace orchid::cpu

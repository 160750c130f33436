// QuantMatrix: sizes, row access and slicing over dense, MLX-affine or block-wise FP8 storage.
#include "orchid/model/weights.h"

#include <algorithm>
#include <vector>

#include "orchid/model/quant.h"
#include "orchid/util/bf16.h"
#include "orchid/util/fp8.h"

namespace orchid {
namespace {

float element(const void* p, DType t, int64_t i) {
  switch (t) {
    case DType::F32:
      return static_cast<const float*>(p)[i];
    case DType::F16:
      return f16_to_f32(static_cast<const uint16_t*>(p)[i]);
    default:  // BF16: the loader admits no other dtype here
      return bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
  }
}

}  // namespace

int64_t QuantMatrix::bytes() const {
  if (format == WeightFormat::dense) return rows * cols * int64_t(dtype_size(dtype));
  if (format == WeightFormat::fp8) {
    const int64_t block_rows_spanned = (block_row0 + rows + block_rows - 1) / block_rows;
    return rows * cols + block_rows_spanned * ((cols + group - 1) / group) * int64_t(dtype_size(dtype));
  }
  return rows * cols * bits / 8 + 2 * rows * (cols / group) * int64_t(dtype_size(dtype));
}

void QuantMatrix::dequant_row(int64_t r, float* out) const {
  if (format == WeightFormat::dense) {
    if (dtype == DType::BF16) {
      const uint16_t* p = static_cast<const uint16_t*>(data) + r * cols;
      for (int64_t c = 0; c < cols; ++c) out[c] = bf16_to_f32(p[c]);
    } else {
      for (int64_t c = 0; c < cols; ++c) out[c] = element(data, dtype, r * cols + c);
    }
    return;
  }
  if (format == WeightFormat::fp8) {
    // code × scale in fp32: exact for bf16 / f16 scales (4 + 8 or 11 significant bits).
    const int64_t blocks = (cols + group - 1) / group, b = (block_row0 + r) / block_rows;
    const uint8_t* codes = static_cast<const uint8_t*>(data) + r * cols;
    for (int64_t g = 0; g < blocks; ++g) {
      const float s = element(scales, dtype, b * blocks + g);
      const int64_t c1 = std::min(cols, (g + 1) * group);
      for (int64_t c = g * group; c < c1; ++c) out[c] = fp8_e4m3_to_f32(codes[c]) * s;
    }
    return;
  }
  const int64_t n_groups = cols / group;
  float s[512], b[512];  // n_groups <= cols / 32; rows wider than 16384 take the slow path
  std::vector<float> sv, bv;
  float* sp = s;
  float* bp = b;
  if (n_groups > 512) {
    sv.resize(size_t(n_groups));
    bv.resize(size_t(n_groups));
    sp = sv.data();
    bp = bv.data();
  }
  for (int64_t g = 0; g < n_groups; ++g) {
    sp[g] = element(scales, dtype, r * n_groups + g);
    bp[g] = element(biases, dtype, r * n_groups + g);
  }
  const uint32_t* codes = static_cast<const uint32_t*>(data) + r * (cols * bits / 32);
  dequant_affine_row(codes, sp, bp, cols, bits, group, out);
}

QuantMatrix QuantMatrix::row_slice(int64_t r0, int64_t n) const {
  QuantMatrix m = *this;
  m.rows = n;
  if (format == WeightFormat::dense) {
    m.data = static_cast<const uint8_t*>(data) + r0 * cols * int64_t(dtype_size(dtype));
  } else if (format == WeightFormat::fp8) {
    m.data = static_cast<const uint8_t*>(data) + r0 * cols;
    const int64_t first = (block_row0 + r0) / block_rows;
    m.block_row0 = (block_row0 + r0) % block_rows;
    m.scales = static_cast<const uint8_t*>(scales) +
               first * ((cols + group - 1) / group) * int64_t(dtype_size(dtype));
  } else {
    m.data = static_cast<const uint32_t*>(data) + r0 * (cols * bits / 32);
    const int64_t sb = r0 * (cols / group) * int64_t(dtype_size(dtype));
    m.scales = static_cast<const uint8_t*>(scales) + sb;
    m.biases = static_cast<const uint8_t*>(biases) + sb;
  }
  return m;
}

}  // namespace orchid

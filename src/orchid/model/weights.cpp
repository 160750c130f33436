// QuantMatrix: sizes, row access and slicing over dense or MLX-affine storage.
#include "orchid/model/weights.h"

#include <vector>

#include "orchid/model/quant.h"
#include "orchid/util/bf16.h"

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
  } else {
    m.data = static_cast<const uint32_t*>(data) + r0 * (cols * bits / 32);
    const int64_t sb = r0 * (cols / group) * int64_t(dtype_size(dtype));
    m.scales = static_cast<const uint8_t*>(scales) + sb;
    m.biases = static_cast<const uint8_t*>(biases) + sb;
  }
  return m;
}

}  // namespace orchid

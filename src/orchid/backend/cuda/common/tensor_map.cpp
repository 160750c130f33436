// Tensor maps (common/tensor_map.h): the driver's cuTensorMapEncodeTiled, looked up at run time,
// encoding fp16 row maps (64-element boxes, 128-byte swizzle) and the GEMMs' A maps.
#include "orchid/backend/cuda/common/tensor_map.h"

#include <cuda_runtime.h>

namespace orchid::cuda {

namespace {

using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*,
                                 const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                                 const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                 CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

// The driver's encoder (12.0 ABI), or null where the driver has none.
EncodeTiled encoder() {
  static const EncodeTiled fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault,
                                         &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess) {
      cudaGetLastError();
      f = nullptr;
    }
    return reinterpret_cast<EncodeTiled>(f);
  }();
  return fn;
}

}  // namespace

bool tensor_maps_supported() {
  return encoder() != nullptr;
}

Status encode_f16_row_map(CUtensorMap* map, const uint16_t* base, int64_t rows, int64_t cols,
                          int64_t ld, int box_rows) {
  const EncodeTiled fn = encoder();
  if (!fn) return err("tensor map: the driver has no cuTensorMapEncodeTiled");
  if (!base || reinterpret_cast<uintptr_t>(base) % 16 != 0 || rows < 1 || cols < 64 || ld < cols ||
      ld % 8 != 0 || box_rows < 1 || box_rows > 256)
    return err("tensor map: bad fp16 array (rows ", rows, ", cols ", cols, ", ld ", ld,
               ", box rows ", box_rows, ")");
  const cuuint64_t dim[2] = {cuuint64_t(cols), cuuint64_t(rows)};
  const cuuint64_t stride[1] = {cuuint64_t(ld) * 2};  // bytes between rows
  const cuuint32_t box[2] = {64, cuuint32_t(box_rows)};
  const cuuint32_t step[2] = {1, 1};
  const CUresult r =
      fn(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, const_cast<uint16_t*>(base), dim, stride, box,
         step, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
         CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) return err("tensor map: cuTensorMapEncodeTiled failed (", int(r), ")");
  return {};
}

Status encode_a_maps(ATmaMaps& m, const uint16_t* hi, const uint16_t* lo, int64_t rows,
                     int64_t cols, int64_t ld, const uint16_t* sums, int64_t sums_ld) {
  m.on = false;
  if (!tensor_maps_supported() || rows == 0) return {};
  ORCHID_TRY(encode_f16_row_map(&m.map[0], hi, rows, cols, ld, kTmaATileRows));
  if (lo) ORCHID_TRY(encode_f16_row_map(&m.map[1], lo, rows, cols, ld, kTmaATileRows));
  if (sums) ORCHID_TRY(encode_f16_row_map(&m.map[2], sums, rows, sums_ld, sums_ld, kTmaATileRows));
  m.on = true;
  return {};
}

}  // namespace orchid::cuda

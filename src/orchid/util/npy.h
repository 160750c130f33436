// NumPy .npy files of float32 (the format of golden fixtures and intermediate-tensor dumps).
// Only what orchid needs: little-endian '<f4', C order. Files are read whole (fixtures are small).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "orchid/util/status.h"

namespace orchid {

struct NpyArray {
  std::vector<int64_t> shape;  // empty for a 0-d array (one element)
  std::vector<float> data;     // C order; size == product of shape
};

// Writes a version 1.0 .npy ('<f4', fortran_order False) byte-for-byte as numpy >= 1.24's
// np.save does: header dict, growth padding, spaces and '\n' up to a multiple of 64 bytes
// (version 2.0 only if the header would not fit in 65535 bytes).
// PRECONDITION: data.size() == product of shape (checked; an error is returned otherwise).
Status write_npy_f32(const std::string& path, std::span<const float> data,
                     std::span<const int64_t> shape);

// Reads a .npy of version 1.0, 2.0 or 3.0 holding '<f4' in C order. Anything else (other
// dtype, big-endian, Fortran order, a malformed header, a size that does not match the
// shape) is an error naming the file and the problem; never reads out of bounds.
Expected<NpyArray> read_npy_f32(const std::string& path);

// The same parser over bytes already in memory; `name` is used in error messages.
Expected<NpyArray> parse_npy_f32(std::span<const uint8_t> bytes, const std::string& name);

}  // namespace orchid

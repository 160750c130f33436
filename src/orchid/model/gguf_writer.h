// Writing GGUF v3 files: metadata, the tensor table and the tensors' data, streamed a row at a
// time so a model of any size is written in bounded memory. The encoders write ggml's block
// layouts from the format's definition: F32, F16, BF16, Q8_0 and Q4_0 as ggml's reference
// quantizers do, Q4_K / Q5_K / Q6_K by a plain range fit (gguf_writer.cpp says how).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include "orchid/model/gguf.h"
#include "orchid/util/status.h"

namespace orchid {

// One tensor to write: either fp32 rows encoded as `type`, or its bytes as they are.
struct GgufTensorSource {
  std::string name;
  std::vector<int64_t> dims;  // innermost first (ggml's ne)
  uint32_t type = uint32_t(GgmlType::F32);
  // fp32 form: fills out[dims[0]] with stored row i, i < (product of dims[1..]). Called from the
  // default thread pool's threads, several rows at once: it must be safe to call concurrently.
  std::function<void(int64_t i, float* out)> row;
  // raw form (used when `row` is empty): the tensor's bytes, already encoded.
  std::span<const uint8_t> raw;
};

// Bytes of n elements of `type` (n a multiple of its block), or an error for a type the encoders
// do not write.
Expected<uint64_t> ggml_row_bytes(uint32_t type, int64_t n);

// Encodes n fp32 values as `type` into out (ggml_row_bytes(type, n) bytes). Q8_0: d = amax / 127,
// q = round(x / d); Q4_0: d = (the value of largest magnitude) / −8, q = min(15, ⌊x / d + 8.5⌋);
// scales rounded to fp16 (nearest even). PRECONDITION: the type and n pass ggml_row_bytes.
void encode_ggml_row(uint32_t type, const float* x, int64_t n, uint8_t* out);

// GGUF metadata values.
GgufValue gguf_int(int64_t v, GgufValueType t = GgufValueType::U32);
GgufValue gguf_real(double v);
GgufValue gguf_text(std::string s);
GgufValue gguf_list(GgufValueType elem, std::vector<GgufValue> items = {});

// Writes the file; `progress(bytes written so far, total)` after each tensor, if given.
Status write_gguf(std::ostream& out, const std::map<std::string, GgufValue>& metadata,
                  const std::vector<GgufTensorSource>& tensors, uint64_t alignment = 32,
                  const std::function<void(uint64_t, uint64_t)>& progress = {});
Status write_gguf(const std::string& path, const std::map<std::string, GgufValue>& metadata,
                  const std::vector<GgufTensorSource>& tensors,
                  const std::function<void(uint64_t, uint64_t)>& progress = {});

}  // namespace orchid

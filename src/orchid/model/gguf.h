// GGUF, llama.cpp's single-file checkpoint format (versions 2 and 3), read as strictly as the
// safetensors reader: every count, length, offset, size and type is checked against the file
// before use, and a bad file gets an error that names what is wrong (and the tensor), never a
// crash or a read outside the bytes.
//
// Layout (little-endian): "GGUF", u32 version, u64 tensor count, u64 metadata count; the
// metadata: (string key, u32 value type, value)…; the tensor infos: (string name, u32 n_dims,
// u64 dims[n_dims] (innermost first), u32 ggml type, u64 offset)…; padding to the alignment
// (metadata `general.alignment`, default 32); the data section, each tensor at its offset from
// its start (aligned). A string is a u64 byte length and the bytes; an array value is a u32
// element type, a u64 count and the elements (arrays of arrays are allowed: depth-limited here).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "orchid/util/status.h"

namespace orchid {

// Tensor element encodings (ggml's numbering; the gaps are types ggml removed).
enum class GgmlType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  IQ4_NL = 20,
  IQ4_XS = 23,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  BF16 = 30,
};

// Elements per block and bytes per block of a type orchid reads the layout of; false for types
// it does not (the IQ and ternary codes but IQ4_NL / IQ4_XS, and unknown numbers).
struct GgmlBlock {
  int elems = 0, bytes = 0;
};
bool ggml_block(uint32_t type, GgmlBlock& out);
// "Q4_K", … ("type 17" for one without a name here).
std::string ggml_type_name(uint32_t type);

// Metadata value types (the format's numbering).
enum class GgufValueType : uint32_t {
  U8 = 0,
  I8 = 1,
  U16 = 2,
  I16 = 3,
  U32 = 4,
  I32 = 5,
  F32 = 6,
  BOOL = 7,
  STRING = 8,
  ARRAY = 9,
  U64 = 10,
  I64 = 11,
  F64 = 12,
};

// A metadata value: integers in i (u64 values above INT64_MAX in u), floats in f, strings in s;
// an array's elements in array (all of type elem).
struct GgufValue {
  GgufValueType type = GgufValueType::U8;
  int64_t i = 0;
  uint64_t u = 0;
  double f = 0;
  bool b = false;
  std::string s;
  GgufValueType elem = GgufValueType::U8;
  std::vector<GgufValue> array;
  bool is_integer() const;
};

struct GgufTensor {
  std::string name;
  uint32_t type = 0;            // a GgmlType (its block known: ggml_block)
  std::vector<int64_t> dims;    // innermost first, as stored (ggml's ne)
  uint64_t offset = 0;          // from the data section's start
  uint64_t nbytes = 0;
  std::span<const uint8_t> data;  // the tensor's nbytes bytes, in the file
  int64_t numel() const;
};

struct GgufFile {
  uint32_t version = 0;
  uint64_t alignment = 32;
  uint64_t data_offset = 0;  // the data section's start in the file
  std::map<std::string, GgufValue> metadata;
  std::vector<GgufTensor> tensors;  // in file order
  const GgufTensor* find(std::string_view name) const;
  // The metadata value under `key`, or nullptr.
  const GgufValue* get(std::string_view key) const;
};

// Bounds on what a file may declare, so that hostile counts cannot allocate without limit.
inline constexpr int kGgufMaxArrayDepth = 4;
inline constexpr uint64_t kGgufMaxStringBytes = uint64_t(1) << 30;
inline constexpr uint32_t kGgufMaxDims = 4;

// Whether `path` names a GGUF file (ends in ".gguf"), which the loaders read instead of a
// directory.
inline bool is_gguf_path(std::string_view path) {
  return path.size() > 5 && path.substr(path.size() - 5) == ".gguf";
}

// Parses and validates a GGUF file held in memory (tensor spans point into `bytes`); file_name
// is for messages. Validation: magic and version; every count bounded by the bytes left; keys
// and tensor names unique and non-empty; value types known; general.alignment a power of two
// ≤ 1 MiB; each tensor's type one whose layout is known, dims ≥ 1 with the innermost a multiple
// of the type's block and no overflow, its offset aligned, and its bytes inside the data
// section, not overlapping another's.
Expected<GgufFile> parse_gguf(std::span<const uint8_t> bytes, std::string_view file_name);

}  // namespace orchid

// GGUF v3 layout: magic, version, tensor and metadata counts; metadata key/type/value records;
// tensor records (name, dims, type, offset into the data section); the data section at the
// next multiple of the alignment, each tensor starting at one.
#include "orchid/model/gguf_writer.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>

namespace orchid {
namespace {

uint16_t to_f16(float x) {
  return uint16_t(_cvtss_sh(x, _MM_FROUND_TO_NEAREST_INT));  // F16C: every build has it
}

class Out {
 public:
  explicit Out(std::ostream& o) : o_(o) {}
  void raw(const void* p, size_t n) {
    o_.write(static_cast<const char*>(p), std::streamsize(n));
    bytes_ += n;
  }
  void u32(uint32_t v) { raw(&v, 4); }
  void u64(uint64_t v) { raw(&v, 8); }
  void str(const std::string& s) { u64(s.size()), raw(s.data(), s.size()); }
  void pad_to(uint64_t alignment) {
    static const char zeros[256] = {};
    while (bytes_ % alignment)
      raw(zeros, size_t(std::min<uint64_t>(alignment - bytes_ % alignment, 256)));
  }
  void value(GgufValueType t, const GgufValue& v) {
    switch (t) {
      case GgufValueType::U8:
      case GgufValueType::I8:
      case GgufValueType::BOOL: {
        const uint8_t x = t == GgufValueType::BOOL ? uint8_t(v.b) : uint8_t(v.i);
        raw(&x, 1);
        break;
      }
      case GgufValueType::U16:
      case GgufValueType::I16: {
        const uint16_t x = uint16_t(v.i);
        raw(&x, 2);
        break;
      }
      case GgufValueType::U32:
      case GgufValueType::I32:
        u32(uint32_t(v.i));
        break;
      case GgufValueType::U64:
      case GgufValueType::I64:
        u64(uint64_t(v.i));
        break;
      case GgufValueType::F32: {
        const float x = float(v.f);
        raw(&x, 4);
        break;
      }
      case GgufValueType::F64:
        raw(&v.f, 8);
        break;
      case GgufValueType::STRING:
        str(v.s);
        break;
      case GgufValueType::ARRAY:
        u32(uint32_t(v.elem)), u64(v.array.size());
        for (const GgufValue& e : v.array) value(v.elem, e);  // arrays of arrays: not written
        break;
    }
  }
  uint64_t bytes() const { return bytes_; }
  bool ok() const { return bool(o_); }

 private:
  std::ostream& o_;
  uint64_t bytes_ = 0;
};

Expected<uint64_t> tensor_bytes(const GgufTensorSource& t) {
  if (t.dims.empty()) return err("gguf: tensor ", t.name, " has no dimensions");
  int64_t rows = 1;
  for (size_t i = 1; i < t.dims.size(); ++i) rows *= t.dims[i];
  if (!t.row) return uint64_t(t.raw.size());
  auto rb = ggml_row_bytes(t.type, t.dims[0]);
  if (!rb) return err("gguf: tensor ", t.name, ": ", rb.message());
  return *rb * uint64_t(rows);
}

}  // namespace

Expected<uint64_t> ggml_row_bytes(uint32_t type, int64_t n) {
  GgmlBlock b;
  const bool writable = type == uint32_t(GgmlType::F32) || type == uint32_t(GgmlType::F16) ||
                        type == uint32_t(GgmlType::Q8_0) || type == uint32_t(GgmlType::Q4_0);
  if (!writable || !ggml_block(type, b)) return err("no encoder for ", ggml_type_name(type));
  if (n <= 0 || n % b.elems != 0)
    return err("a row of ", n, " elements does not fill ", ggml_type_name(type), " blocks of ",
               b.elems);
  return uint64_t(n / b.elems) * uint64_t(b.bytes);
}

void encode_ggml_row(uint32_t type, const float* x, int64_t n, uint8_t* out) {
  if (type == uint32_t(GgmlType::F32)) return void(std::memcpy(out, x, size_t(n) * 4));
  if (type == uint32_t(GgmlType::F16)) {
    for (int64_t i = 0; i < n; ++i) {
      const uint16_t h = to_f16(x[i]);
      std::memcpy(out + 2 * i, &h, 2);
    }
    return;
  }
  const bool q8 = type == uint32_t(GgmlType::Q8_0);
  const int64_t block_bytes = q8 ? 34 : 18;
  for (int64_t blk = 0; blk < n / 32; ++blk) {
    const float* v = x + blk * 32;
    uint8_t* o = out + blk * block_bytes;
    float amax = 0.f, max = 0.f;
    for (int k = 0; k < 32; ++k)
      if (std::fabs(v[k]) > amax) amax = std::fabs(v[k]), max = v[k];
    const float d = q8 ? amax / 127.f : max / -8.f, id = d != 0.f ? 1.f / d : 0.f;
    const uint16_t dh = to_f16(d);
    std::memcpy(o, &dh, 2);
    if (q8) {
      for (int k = 0; k < 32; ++k) o[2 + k] = uint8_t(int8_t(std::lround(v[k] * id)));
    } else {
      const auto q = [&](int j) { return uint8_t(std::min(15, int(v[j] * id + 8.5f))); };
      for (int k = 0; k < 16; ++k) o[2 + k] = uint8_t(q(k) | (q(k + 16) << 4));
    }
  }
}

GgufValue gguf_int(int64_t v, GgufValueType t) {
  GgufValue x;
  x.type = t, x.i = v, x.u = uint64_t(v);
  return x;
}
GgufValue gguf_real(double v) {
  GgufValue x;
  x.type = GgufValueType::F32, x.f = v;
  return x;
}
GgufValue gguf_text(std::string s) {
  GgufValue x;
  x.type = GgufValueType::STRING, x.s = std::move(s);
  return x;
}
GgufValue gguf_list(GgufValueType elem, std::vector<GgufValue> items) {
  GgufValue x;
  x.type = GgufValueType::ARRAY, x.elem = elem, x.array = std::move(items);
  return x;
}

Status write_gguf(std::ostream& os, const std::map<std::string, GgufValue>& metadata,
                  const std::vector<GgufTensorSource>& tensors, uint64_t alignment,
                  const std::function<void(uint64_t, uint64_t)>& progress) {
  std::vector<uint64_t> sizes;
  uint64_t total = 0;
  for (const GgufTensorSource& t : tensors) {
    auto b = tensor_bytes(t);
    if (!b) return b.error();
    sizes.push_back(*b);
    total += (*b + alignment - 1) / alignment * alignment;
  }
  Out out(os);
  out.u32(0x46554747u), out.u32(3), out.u64(tensors.size());
  auto md = metadata;
  if (alignment != 32) md["general.alignment"] = gguf_int(int64_t(alignment));
  out.u64(md.size());
  for (const auto& [k, v] : md) out.str(k), out.u32(uint32_t(v.type)), out.value(v.type, v);
  uint64_t offset = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const GgufTensorSource& t = tensors[i];
    out.str(t.name), out.u32(uint32_t(t.dims.size()));
    for (int64_t d : t.dims) out.u64(uint64_t(d));
    out.u32(t.type), out.u64(offset);
    offset += (sizes[i] + alignment - 1) / alignment * alignment;
  }
  out.pad_to(alignment);
  const uint64_t data_start = out.bytes();
  std::vector<float> row;
  std::vector<uint8_t> enc;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const GgufTensorSource& t = tensors[i];
    if (!t.row) {
      out.raw(t.raw.data(), t.raw.size());
    } else {
      const int64_t cols = t.dims[0];
      const uint64_t rb = *ggml_row_bytes(t.type, cols);
      row.resize(size_t(cols));
      enc.resize(size_t(rb));
      for (uint64_t r = 0; r < sizes[i] / rb; ++r) {
        t.row(int64_t(r), row.data());
        encode_ggml_row(t.type, row.data(), cols, enc.data());
        out.raw(enc.data(), enc.size());
      }
    }
    out.pad_to(alignment);
    if (!out.ok()) return err("gguf: write failed at tensor ", t.name);
    if (progress) progress(out.bytes() - data_start, total);
  }
  return {};
}

Status write_gguf(const std::string& path, const std::map<std::string, GgufValue>& metadata,
                  const std::vector<GgufTensorSource>& tensors,
                  const std::function<void(uint64_t, uint64_t)>& progress) {
  std::ofstream f(path, std::ios::binary);
  if (!f) return err("cannot create ", path);
  ORCHID_TRY(write_gguf(f, metadata, tensors, 32, progress));
  f.close();
  if (!f) return err("cannot write ", path);
  return {};
}

}  // namespace orchid

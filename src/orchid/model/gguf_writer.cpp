// GGUF v3 layout: magic, version, tensor and metadata counts; metadata key/type/value records;
// tensor records (name, dims, type, offset into the data section); the data section at the
// next multiple of the alignment, each tensor starting at one.
#include "orchid/model/gguf_writer.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>

#include "orchid/util/bf16.h"
#include "orchid/util/thread_pool.h"

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

int nearest(float v) {
  return int(std::lrint(v));
}

// Q4_K / Q5_K (256 values): eight sub-blocks of 32, each x ≈ d·sc_j·q − dmin·m_j with q of 4 (5)
// bits; sc_j and m_j 6-bit multiples of the super-block's fp16 d and dmin. Each sub-block's range
// is [min(0, lo), hi]; its step and offset are rounded onto the 6-bit grids, then each value to the
// nearest code of the rounded grid. Layout (ggml's block_q4_K / block_q5_K): d, dmin (fp16),
// scales[12] (sc_j, m_j: j < 4 in the low 6 bits of bytes j, j + 4; j ≥ 4 as nibbles of byte
// j + 4 with their top 2 bits in bytes j − 4 and j), [Q5_K: qh[32], bit 2c (2c + 1) of byte l the
// fifth bit of value l (l + 32) of 64-value chunk c], qs[128] (byte 32c + l: value l of chunk c
// in the low nibble, value l + 32 in the high one).
void encode_affine_k(const float* x, bool five, uint8_t* o) {
  const int levels = five ? 31 : 15;
  float step[8], off[8];
  float max_step = 0.f, max_off = 0.f;
  for (int j = 0; j < 8; ++j) {
    float lo = 0.f, hi = -INFINITY;
    for (int l = 0; l < 32; ++l) lo = std::min(lo, x[32 * j + l]), hi = std::max(hi, x[32 * j + l]);
    hi = std::max(hi, lo);
    step[j] = (hi - lo) / float(levels), off[j] = -lo;
    max_step = std::max(max_step, step[j]), max_off = std::max(max_off, off[j]);
  }
  const uint16_t dh = to_f16(max_step / 63.f), mh = to_f16(max_off / 63.f);
  const float d = _cvtsh_ss(dh), dmin = _cvtsh_ss(mh);
  uint8_t sc[8], m[8];
  for (int j = 0; j < 8; ++j) {
    sc[j] = uint8_t(d > 0.f ? std::clamp(nearest(step[j] / d), 0, 63) : 0);
    m[j] = uint8_t(dmin > 0.f ? std::clamp(nearest(off[j] / dmin), 0, 63) : 0);
  }
  std::memcpy(o, &dh, 2);
  std::memcpy(o + 2, &mh, 2);
  uint8_t* scales = o + 4;
  std::memset(scales, 0, 12);
  for (int j = 0; j < 4; ++j) scales[j] = sc[j], scales[j + 4] = m[j];
  for (int j = 4; j < 8; ++j) {
    scales[j + 4] = uint8_t((sc[j] & 0xF) | ((m[j] & 0xF) << 4));
    scales[j - 4] |= uint8_t((sc[j] >> 4) << 6);
    scales[j] |= uint8_t((m[j] >> 4) << 6);
  }
  uint8_t q[256];
  for (int j = 0; j < 8; ++j) {
    const float e = d * float(sc[j]), mm = dmin * float(m[j]);
    for (int l = 0; l < 32; ++l)
      q[32 * j + l] = uint8_t(e > 0.f ? std::clamp(nearest((x[32 * j + l] + mm) / e), 0, levels) : 0);
  }
  uint8_t* qh = o + 16;
  uint8_t* qs = o + (five ? 48 : 16);
  if (five) std::memset(qh, 0, 32);
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l) {
      const uint8_t a = q[64 * c + l], b = q[64 * c + 32 + l];
      qs[32 * c + l] = uint8_t((a & 0xF) | ((b & 0xF) << 4));
      if (five) qh[l] |= uint8_t(((a >> 4) << (2 * c)) | ((b >> 4) << (2 * c + 1)));
    }
}

// Q6_K (256 values): sixteen sub-blocks of 16, x ≈ d·sc_j·(q − 32), q of 6 bits, sc_j int8; each
// sub-block's step is its value of largest magnitude / −32 (as Q4_0 takes its scale), rounded onto
// the int8 grid of d = max |step| / 127. Layout (ggml's block_q6_K): ql[128] (for each 128-value
// half h: byte 64h + l holds values l / l + 64 as low / high nibbles, byte 64h + 32 + l values
// l + 32 / l + 96), qh[64] (byte 32h + l: the top two bits of values l, l + 32, l + 64, l + 96 at
// bits 0, 2, 4, 6), scales[16], d (fp16).
void encode_q6_k(const float* x, uint8_t* o) {
  float step[16], max_abs = 0.f;
  for (int j = 0; j < 16; ++j) {
    float big = 0.f;
    for (int l = 0; l < 16; ++l)
      if (std::fabs(x[16 * j + l]) > std::fabs(big)) big = x[16 * j + l];
    step[j] = big / -32.f;
    max_abs = std::max(max_abs, std::fabs(step[j]));
  }
  const uint16_t dh = to_f16(max_abs / 127.f);
  const float d = _cvtsh_ss(dh);
  int8_t sc[16];
  for (int j = 0; j < 16; ++j) sc[j] = int8_t(d > 0.f ? std::clamp(nearest(step[j] / d), -127, 127) : 0);
  uint8_t q[256];
  for (int j = 0; j < 16; ++j) {
    const float e = d * float(sc[j]);
    for (int l = 0; l < 16; ++l)
      q[16 * j + l] = uint8_t(e != 0.f ? std::clamp(nearest(x[16 * j + l] / e), -32, 31) + 32 : 32);
  }
  uint8_t* ql = o;
  uint8_t* qh = o + 128;
  for (int h = 0; h < 2; ++h)
    for (int l = 0; l < 32; ++l) {
      const uint8_t* v = q + 128 * h;
      ql[64 * h + l] = uint8_t((v[l] & 0xF) | ((v[l + 64] & 0xF) << 4));
      ql[64 * h + 32 + l] = uint8_t((v[l + 32] & 0xF) | ((v[l + 96] & 0xF) << 4));
      qh[32 * h + l] = uint8_t((v[l] >> 4) | ((v[l + 32] >> 4) << 2) | ((v[l + 64] >> 4) << 4) |
                               ((v[l + 96] >> 4) << 6));
    }
  std::memcpy(o + 192, sc, 16);
  std::memcpy(o + 208, &dh, 2);
}

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
  bool writable = false;
  for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_0,
                     GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K})
    writable = writable || type == uint32_t(t);
  if (!writable || !ggml_block(type, b)) return err("no encoder for ", ggml_type_name(type));
  if (n <= 0 || n % b.elems != 0)
    return err("a row of ", n, " elements does not fill ", ggml_type_name(type), " blocks of ",
               b.elems);
  return uint64_t(n / b.elems) * uint64_t(b.bytes);
}

void encode_ggml_row(uint32_t type, const float* x, int64_t n, uint8_t* out) {
  if (type == uint32_t(GgmlType::F32)) return void(std::memcpy(out, x, size_t(n) * 4));
  if (type == uint32_t(GgmlType::BF16)) {
    for (int64_t i = 0; i < n; ++i) {
      const uint16_t h = f32_to_bf16(x[i]);
      std::memcpy(out + 2 * i, &h, 2);
    }
    return;
  }
  if (type == uint32_t(GgmlType::Q4_K) || type == uint32_t(GgmlType::Q5_K)) {
    const bool five = type == uint32_t(GgmlType::Q5_K);
    for (int64_t b = 0; b < n / 256; ++b) encode_affine_k(x + 256 * b, five, out + b * (five ? 176 : 144));
    return;
  }
  if (type == uint32_t(GgmlType::Q6_K)) {
    for (int64_t b = 0; b < n / 256; ++b) encode_q6_k(x + 256 * b, out + b * 210);
    return;
  }
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
  std::vector<uint8_t> enc;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const GgufTensorSource& t = tensors[i];
    if (!t.row) {
      out.raw(t.raw.data(), t.raw.size());
    } else {
      // Rows made and encoded by the pool a chunk (~16 MiB of fp32) at a time, written in order.
      const int64_t cols = t.dims[0];
      const uint64_t rb = *ggml_row_bytes(t.type, cols);
      const int64_t rows = int64_t(sizes[i] / rb);
      const int64_t chunk = std::clamp<int64_t>((int64_t(1) << 22) / cols, 1, rows);
      enc.resize(size_t(chunk) * size_t(rb));
      for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
        const int64_t n = std::min(chunk, rows - r0);
        default_pool().parallel_for(n, 1, [&](int64_t a, int64_t b) {
          std::vector<float> row(static_cast<size_t>(cols));
          for (int64_t r = a; r < b; ++r) {
            t.row(r0 + r, row.data());
            encode_ggml_row(t.type, row.data(), cols, enc.data() + size_t(r) * rb);
          }
        });
        out.raw(enc.data(), size_t(n) * size_t(rb));
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

// GGUF parsing: a cursor over the file's bytes that fails, naming what it was reading, instead
// of reading past the end; then the tensor table checked against the data section.
#include "orchid/model/gguf.h"

#include <algorithm>
#include <cstring>
#include <iterator>
#include <limits>
#include <type_traits>

namespace orchid {
namespace {

constexpr uint32_t kMagic = 0x46554747u;  // "GGUF", little-endian

struct Cursor {
  std::span<const uint8_t> bytes;
  uint64_t pos = 0;
  std::string_view file;

  uint64_t left() const { return bytes.size() - pos; }
  template <class T>
  Expected<T> read(const char* what) {
    if (left() < sizeof(T))
      return err(file, ": truncated at byte ", pos, " (reading ", what, ")");
    T v;
    std::memcpy(&v, bytes.data() + pos, sizeof(T));  // the format is little-endian, as is x86
    pos += sizeof(T);
    return v;
  }
  Expected<std::string> string(const char* what) {
    auto n = read<uint64_t>(what);
    if (!n) return n.error();
    if (*n > left() || *n > kGgufMaxStringBytes)
      return err(file, ": ", what, " at byte ", pos - 8, " claims ", *n, " bytes, ", left(),
                 " are left");
    std::string s(reinterpret_cast<const char*>(bytes.data() + pos), size_t(*n));
    pos += *n;
    return s;
  }
};

// Bytes a value of a fixed-size type takes (0: strings and arrays).
uint64_t scalar_bytes(GgufValueType t) {
  switch (t) {
    case GgufValueType::U8:
    case GgufValueType::I8:
    case GgufValueType::BOOL:
      return 1;
    case GgufValueType::U16:
    case GgufValueType::I16:
      return 2;
    case GgufValueType::U32:
    case GgufValueType::I32:
    case GgufValueType::F32:
      return 4;
    case GgufValueType::U64:
    case GgufValueType::I64:
    case GgufValueType::F64:
      return 8;
    case GgufValueType::STRING:
    case GgufValueType::ARRAY:
      return 0;
  }
  return 0;
}

bool known_value_type(uint32_t t) {
  return t <= uint32_t(GgufValueType::F64);
}

Expected<GgufValue> read_value(Cursor& c, GgufValueType type, const std::string& key, int depth);

Status read_scalar(Cursor& c, GgufValue& v, const std::string& key) {
  // An integer of type T into v.i (and v.u when unsigned; u64 above INT64_MAX: i = -1).
  auto integer = [&]<class T>() -> Status {
    auto x = c.read<T>(key.c_str());
    if (!x) return x.error();
    if constexpr (std::is_unsigned_v<T>) {
      v.u = *x;
      v.i = uint64_t(*x) > uint64_t(std::numeric_limits<int64_t>::max()) ? -1 : int64_t(*x);
    } else {
      v.i = *x;
    }
    return {};
  };
  auto real = [&]<class T>() -> Status {
    auto x = c.read<T>(key.c_str());
    if (!x) return x.error();
    v.f = *x;
    return {};
  };
  switch (v.type) {
    case GgufValueType::U8:
      return integer.operator()<uint8_t>();
    case GgufValueType::I8:
      return integer.operator()<int8_t>();
    case GgufValueType::U16:
      return integer.operator()<uint16_t>();
    case GgufValueType::I16:
      return integer.operator()<int16_t>();
    case GgufValueType::U32:
      return integer.operator()<uint32_t>();
    case GgufValueType::I32:
      return integer.operator()<int32_t>();
    case GgufValueType::U64:
      return integer.operator()<uint64_t>();
    case GgufValueType::I64:
      return integer.operator()<int64_t>();
    case GgufValueType::F32:
      return real.operator()<float>();
    case GgufValueType::F64:
      return real.operator()<double>();
    case GgufValueType::BOOL: {
      auto x = c.read<uint8_t>(key.c_str());
      if (!x) return x.error();
      if (*x > 1) return err(c.file, ": ", key, ": a bool of value ", int(*x));
      v.b = *x != 0;
      return {};
    }
    case GgufValueType::STRING: {
      auto s = c.string(key.c_str());
      if (!s) return s.error();
      v.s = std::move(*s);
      return {};
    }
    case GgufValueType::ARRAY:
      return err(c.file, ": ", key, ": an array where a scalar was expected");
  }
  return {};
}

Expected<GgufValue> read_value(Cursor& c, GgufValueType type, const std::string& key, int depth) {
  GgufValue v;
  v.type = type;
  if (type != GgufValueType::ARRAY) {
    if (Status s = read_scalar(c, v, key); !s.ok()) return s.error();
    return v;
  }
  if (depth >= kGgufMaxArrayDepth)
    return err(c.file, ": ", key, ": arrays nested deeper than ", kGgufMaxArrayDepth);
  auto et = c.read<uint32_t>(key.c_str());
  if (!et) return et.error();
  if (!known_value_type(*et))
    return err(c.file, ": ", key, ": array of unknown value type ", *et);
  v.elem = GgufValueType(*et);
  auto n = c.read<uint64_t>(key.c_str());
  if (!n) return n.error();
  // Each element takes at least its fixed size (strings and arrays: their 8-byte length).
  const uint64_t least = scalar_bytes(v.elem) ? scalar_bytes(v.elem) : 8;
  if (*n > c.left() / least)
    return err(c.file, ": ", key, ": an array of ", *n, " elements cannot fit the ", c.left(),
               " bytes left");
  v.array.reserve(size_t(*n));
  for (uint64_t k = 0; k < *n; ++k) {
    auto e = read_value(c, v.elem, key, depth + 1);
    if (!e) return e.error();
    v.array.push_back(std::move(*e));
  }
  return v;
}

bool checked_mul(int64_t a, int64_t b, int64_t& out) {
  return !__builtin_mul_overflow(a, b, &out);
}

}  // namespace

bool ggml_block(uint32_t type, GgmlBlock& out) {
  switch (GgmlType(type)) {
    case GgmlType::F32:
    case GgmlType::I32:
      out = {1, 4};
      return true;
    case GgmlType::F16:
    case GgmlType::BF16:
    case GgmlType::I16:
      out = {1, 2};
      return true;
    case GgmlType::F64:
    case GgmlType::I64:
      out = {1, 8};
      return true;
    case GgmlType::I8:
      out = {1, 1};
      return true;
    case GgmlType::Q4_0:
    case GgmlType::IQ4_NL:
      out = {32, 18};  // f16 scale, 16 bytes of nibbles
      return true;
    case GgmlType::Q4_1:
      out = {32, 20};  // f16 scale and min
      return true;
    case GgmlType::Q5_0:
      out = {32, 22};  // + 4 bytes of fifth bits
      return true;
    case GgmlType::Q5_1:
      out = {32, 24};
      return true;
    case GgmlType::Q8_0:
      out = {32, 34};
      return true;
    case GgmlType::Q8_1:
      out = {32, 36};
      return true;
    case GgmlType::Q2_K:
      out = {256, 84};
      return true;
    case GgmlType::Q3_K:
      out = {256, 110};
      return true;
    case GgmlType::Q4_K:
      out = {256, 144};
      return true;
    case GgmlType::Q5_K:
      out = {256, 176};
      return true;
    case GgmlType::Q6_K:
      out = {256, 210};
      return true;
    case GgmlType::Q8_K:
      out = {256, 292};
      return true;
    case GgmlType::IQ4_XS:
      out = {256, 136};
      return true;
  }
  return false;
}

std::string ggml_type_name(uint32_t type) {
  static const char* const kNames[] = {
      "F32",  "F16",  "Q4_0",   "Q4_1",    "type 4",   "type 5",   "Q5_0",  "Q5_1",
      "Q8_0", "Q8_1", "Q2_K",   "Q3_K",    "Q4_K",     "Q5_K",     "Q6_K",  "Q8_K",
      "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S",  "IQ2_S", "IQ4_XS",
      "I8",   "I16",  "I32",    "I64",     "F64",      "IQ1_M",    "BF16"};
  if (type < std::size(kNames)) return kNames[type];
  return "type " + std::to_string(type);
}

bool GgufValue::is_integer() const {
  switch (type) {
    case GgufValueType::U8:
    case GgufValueType::I8:
    case GgufValueType::U16:
    case GgufValueType::I16:
    case GgufValueType::U32:
    case GgufValueType::I32:
    case GgufValueType::U64:
    case GgufValueType::I64:
      return true;
    default:
      return false;
  }
}

int64_t GgufTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;  // parse_gguf checked that this does not overflow
  return n;
}

const GgufTensor* GgufFile::find(std::string_view name) const {
  for (const GgufTensor& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

const GgufValue* GgufFile::get(std::string_view key) const {
  const auto it = metadata.find(std::string(key));
  return it == metadata.end() ? nullptr : &it->second;
}

Expected<GgufFile> parse_gguf(std::span<const uint8_t> bytes, std::string_view file_name) {
  Cursor c{bytes, 0, file_name};
  auto magic = c.read<uint32_t>("the magic");
  if (!magic) return magic.error();
  if (*magic != kMagic) return err(file_name, ": not a GGUF file (no \"GGUF\" magic)");
  auto version = c.read<uint32_t>("the version");
  if (!version) return version.error();
  if (*version != 2 && *version != 3)
    return err(file_name, ": GGUF version ", *version, " (orchid reads versions 2 and 3)");
  GgufFile f;
  f.version = *version;
  auto n_tensors = c.read<uint64_t>("the tensor count");
  if (!n_tensors) return n_tensors.error();
  auto n_kv = c.read<uint64_t>("the metadata count");
  if (!n_kv) return n_kv.error();
  // A key-value pair takes at least 8 + 1 + 4 + 1 bytes, a tensor info 8 + 1 + 4 + 8 + 4 + 8.
  if (*n_kv > c.left() / 14)
    return err(file_name, ": ", *n_kv, " metadata entries cannot fit the file");
  if (*n_tensors > c.left() / 33)
    return err(file_name, ": ", *n_tensors, " tensors cannot fit the file");

  for (uint64_t k = 0; k < *n_kv; ++k) {
    auto key = c.string("a metadata key");
    if (!key) return key.error();
    if (key->empty()) return err(file_name, ": metadata entry ", k, " has an empty key");
    if (f.metadata.count(*key)) return err(file_name, ": metadata key ", *key, " appears twice");
    auto type = c.read<uint32_t>(key->c_str());
    if (!type) return type.error();
    if (!known_value_type(*type))
      return err(file_name, ": ", *key, ": unknown value type ", *type);
    auto value = read_value(c, GgufValueType(*type), *key, 0);
    if (!value) return value.error();
    f.metadata.emplace(std::move(*key), std::move(*value));
  }
  if (const GgufValue* a = f.get("general.alignment")) {
    if (!a->is_integer() || a->i <= 0 || a->i > (1 << 20) || (a->i & (a->i - 1)) != 0)
      return err(file_name, ": general.alignment must be a power of two up to 1 MiB");
    f.alignment = uint64_t(a->i);
  }

  f.tensors.reserve(size_t(*n_tensors));
  for (uint64_t k = 0; k < *n_tensors; ++k) {
    GgufTensor t;
    auto name = c.string("a tensor name");
    if (!name) return name.error();
    if (name->empty()) return err(file_name, ": tensor ", k, " has an empty name");
    t.name = std::move(*name);
    const std::string& tn = t.name;
    auto n_dims = c.read<uint32_t>(tn.c_str());
    if (!n_dims) return n_dims.error();
    if (*n_dims < 1 || *n_dims > kGgufMaxDims)
      return err(file_name, ": tensor ", tn, " has ", *n_dims, " dimensions (1 to ", kGgufMaxDims,
                 ")");
    int64_t numel = 1;
    for (uint32_t d = 0; d < *n_dims; ++d) {
      auto dim = c.read<uint64_t>(tn.c_str());
      if (!dim) return dim.error();
      if (*dim < 1 || *dim > uint64_t(std::numeric_limits<int64_t>::max()) ||
          !checked_mul(numel, int64_t(*dim), numel))
        return err(file_name, ": tensor ", tn, ": dimension ", d, " of ", *dim,
                   " (each at least 1, their product within 63 bits)");
      t.dims.push_back(int64_t(*dim));
    }
    auto type = c.read<uint32_t>(tn.c_str());
    if (!type) return type.error();
    t.type = *type;
    GgmlBlock blk;
    if (!ggml_block(t.type, blk))
      return err(file_name, ": tensor ", tn, " is of type ", ggml_type_name(t.type),
                 ", which orchid does not read");
    if (t.dims[0] % blk.elems != 0)
      return err(file_name, ": tensor ", tn, ": its rows of ", t.dims[0], " elements are not whole ",
                 ggml_type_name(t.type), " blocks of ", blk.elems);
    auto offset = c.read<uint64_t>(tn.c_str());
    if (!offset) return offset.error();
    if (*offset % f.alignment != 0)
      return err(file_name, ": tensor ", tn, ": offset ", *offset, " is not a multiple of the ",
                 f.alignment, "-byte alignment");
    t.offset = *offset;
    int64_t nbytes = 0;
    if (!checked_mul(numel / blk.elems, blk.bytes, nbytes))
      return err(file_name, ": tensor ", tn, " is too large");
    t.nbytes = uint64_t(nbytes);  // its span is set once the data section's start is known
    f.tensors.push_back(std::move(t));
  }
  // The data section starts at the next multiple of the alignment.
  const uint64_t data = (c.pos + f.alignment - 1) / f.alignment * f.alignment;
  if (data > bytes.size() && !f.tensors.empty())
    return err(file_name, ": truncated: the data section would start at byte ", data, " of ",
               bytes.size());
  f.data_offset = data;
  const uint64_t room = bytes.size() > data ? bytes.size() - data : 0;
  // Inside the data section, and no two tensors sharing bytes.
  std::vector<std::pair<uint64_t, size_t>> order;  // (offset, index)
  for (size_t k = 0; k < f.tensors.size(); ++k) {
    GgufTensor& t = f.tensors[k];
    const uint64_t n = t.nbytes;
    if (t.offset > room || n > room - t.offset)
      return err(file_name, ": tensor ", t.name, ": bytes [", t.offset, ", ", t.offset + n,
                 ") of the data section, which holds ", room);
    t.data = bytes.subspan(size_t(data + t.offset), size_t(n));
    order.push_back({t.offset, k});
  }
  std::sort(order.begin(), order.end());
  for (size_t k = 1; k < order.size(); ++k) {
    const GgufTensor& a = f.tensors[order[k - 1].second];
    const GgufTensor& b = f.tensors[order[k].second];
    if (a.offset + a.nbytes > b.offset)
      return err(file_name, ": tensors ", a.name, " and ", b.name, " overlap");
  }
  // Names are unique.
  std::vector<std::string_view> names;
  for (const GgufTensor& t : f.tensors) names.push_back(t.name);
  std::sort(names.begin(), names.end());
  if (auto d = std::adjacent_find(names.begin(), names.end()); d != names.end())
    return err(file_name, ": tensor ", *d, " appears twice");
  return f;
}

}  // namespace orchid

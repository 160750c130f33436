// .npy float32 reader/writer. Format (numpy.lib.format): magic "\x93NUMPY", major, minor,
// header length (u16 for v1, u32 for v2/v3, little-endian), an ASCII Python dict literal
// {'descr': ..., 'fortran_order': ..., 'shape': (...), } padded with spaces and '\n', data.
#include "orchid/util/npy.h"

#include <bit>
#include <cstring>
#include <fstream>
#include <optional>
#include <string_view>

namespace orchid {
namespace {

static_assert(std::endian::native == std::endian::little, "npy I/O assumes a little-endian host");

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;
constexpr size_t kAlign = 64;             // numpy's ARRAY_ALIGN
constexpr size_t kGrowthAxisDigits = 21;  // numpy's GROWTH_AXIS_MAX_DIGITS
constexpr size_t kMaxRank = 64;           // numpy's NPY_MAXDIMS (2.x)

// Tokenizer/parser for the header dict. Keys and values are only those numpy writes.
class HeaderParser {
 public:
  explicit HeaderParser(std::string_view s) : s_(s) {}

  void skip_ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r'))
      ++i_;
  }
  bool eat(char c) {
    skip_ws();
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  bool eat_word(std::string_view w) {
    skip_ws();
    if (s_.substr(i_, w.size()) != w) return false;
    i_ += w.size();
    return true;
  }
  std::optional<std::string> string() {
    skip_ws();
    if (i_ >= s_.size() || (s_[i_] != '\'' && s_[i_] != '"')) return std::nullopt;
    char q = s_[i_++];
    size_t end = s_.find(q, i_);
    if (end == std::string_view::npos) return std::nullopt;
    std::string out(s_.substr(i_, end - i_));
    i_ = end + 1;
    return out;
  }
  std::optional<int64_t> integer() {
    skip_ws();
    size_t start = i_;
    int64_t v = 0;
    while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') {
      if (v > (INT64_MAX - 9) / 10) return std::nullopt;  // would overflow
      v = v * 10 + (s_[i_++] - '0');
    }
    if (i_ == start) return std::nullopt;
    return v;
  }
  bool at_end() {
    skip_ws();
    return i_ == s_.size();
  }

 private:
  std::string_view s_;
  size_t i_ = 0;
};

struct Header {
  std::string descr;
  bool fortran_order = false;
  std::vector<int64_t> shape;
};

Expected<Header> parse_header(std::string_view text, const std::string& name) {
  auto bad = [&](const char* what) {
    return err(name, ": malformed .npy header (", what, "): ", std::string(text.substr(0, 200)));
  };
  HeaderParser p(text);
  Header h;
  bool seen_descr = false, seen_order = false, seen_shape = false;
  if (!p.eat('{')) return bad("expected '{'");
  while (!p.eat('}')) {
    auto key = p.string();
    if (!key) return bad("expected a quoted key");
    if (!p.eat(':')) return bad("expected ':'");
    if (*key == "descr" && !seen_descr) {
      auto v = p.string();
      if (!v) return bad("'descr' must be a string");
      h.descr = *v;
      seen_descr = true;
    } else if (*key == "fortran_order" && !seen_order) {
      if (p.eat_word("True")) {
        h.fortran_order = true;
      } else if (p.eat_word("False")) {
        h.fortran_order = false;
      } else {
        return bad("'fortran_order' must be True or False");
      }
      seen_order = true;
    } else if (*key == "shape" && !seen_shape) {
      if (!p.eat('(')) return bad("'shape' must be a tuple");
      while (!p.eat(')')) {
        if (h.shape.size() == kMaxRank) return bad("more than 64 dimensions");
        auto d = p.integer();
        if (!d) return bad("shape entries must be non-negative integers");
        h.shape.push_back(*d);
        if (!p.eat(',')) {
          if (!p.eat(')')) return bad("expected ',' or ')' in shape");
          break;
        }
      }
      seen_shape = true;
    } else {
      return err(name, ": unexpected or repeated key '", *key, "' in .npy header");
    }
    if (!p.eat(',')) {
      if (!p.eat('}')) return bad("expected ',' or '}'");
      break;
    }
  }
  if (!p.at_end()) return bad("trailing characters after the dict");
  if (!seen_descr || !seen_order || !seen_shape)
    return bad("needs 'descr', 'fortran_order' and 'shape'");
  return h;
}

uint32_t read_le(const uint8_t* p, int n) {
  uint32_t v = 0;
  for (int i = 0; i < n; ++i) v |= uint32_t(p[i]) << (8 * i);
  return v;
}

std::string shape_repr(std::span<const int64_t> shape) {
  // Python's tuple repr: (), (5,), (2, 3)
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  if (shape.size() == 1) s += ",";
  return s + ")";
}

}  // namespace

Expected<NpyArray> parse_npy_f32(std::span<const uint8_t> bytes, const std::string& name) {
  if (bytes.size() < kMagicLen + 2 || std::memcmp(bytes.data(), kMagic, kMagicLen) != 0)
    return err(name, ": not a .npy file (missing \\x93NUMPY magic)");
  const int major = bytes[6], minor = bytes[7];
  if (minor != 0 || major < 1 || major > 3)
    return err(name, ": .npy version ", major, ".", minor, " is not supported (1.0, 2.0, 3.0)");
  const size_t len_bytes = major == 1 ? 2 : 4;
  const size_t prefix = kMagicLen + 2 + len_bytes;
  if (bytes.size() < prefix) return err(name, ": truncated .npy header length");
  const uint64_t header_len = read_le(bytes.data() + 8, int(len_bytes));
  if (header_len > bytes.size() - prefix)
    return err(name, ": .npy header length ", header_len, " exceeds the file size ", bytes.size());
  std::string_view text(reinterpret_cast<const char*>(bytes.data() + prefix), header_len);
  auto h = parse_header(text, name);
  if (!h) return h.error();
  if (h->descr != "<f4")
    return err(name, ": .npy dtype '", h->descr, "' is not supported (expected '<f4' float32)");
  if (h->fortran_order)
    return err(name, ": .npy fortran_order True is not supported (save a C-ordered array)");

  const uint64_t data_bytes = bytes.size() - prefix - header_len;
  uint64_t numel = 1;
  bool overflow = false;
  for (int64_t d : h->shape) overflow |= __builtin_mul_overflow(numel, uint64_t(d), &numel);
  // A zero dimension makes the product 0 whatever came before (the wrapped value times 0).
  for (int64_t d : h->shape) overflow &= d != 0;
  overflow |= numel > UINT64_MAX / 4;
  if (overflow) return err(name, ": .npy shape ", shape_repr(h->shape), " overflows 64-bit sizes");
  if (numel * 4 != data_bytes)
    return err(name, ": .npy data is ", data_bytes, " bytes but shape ", shape_repr(h->shape),
               " of float32 needs ", numel * 4);
  NpyArray a;
  a.shape = std::move(h->shape);
  a.data.resize(numel);
  if (numel) std::memcpy(a.data.data(), bytes.data() + prefix + header_len, numel * 4);
  return a;
}

Expected<NpyArray> read_npy_f32(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return err(path, ": cannot open");
  in.seekg(0, std::ios::end);
  std::streamoff size = in.tellg();
  if (size < 0) return err(path, ": cannot determine the file size");
  in.seekg(0);
  std::vector<uint8_t> bytes(static_cast<size_t>(size));
  if (size > 0 && !in.read(reinterpret_cast<char*>(bytes.data()), size))
    return err(path, ": read failed");
  return parse_npy_f32(bytes, path);
}

Status write_npy_f32(const std::string& path, std::span<const float> data,
                     std::span<const int64_t> shape) {
  uint64_t numel = 1;
  for (int64_t d : shape) {
    if (d < 0) return err(path, ": negative dimension in shape ", shape_repr(shape));
    numel *= uint64_t(d);
  }
  if (numel != data.size())
    return err(path, ": shape ", shape_repr(shape), " has ", numel, " elements but ", data.size(),
               " were given");
  std::string header =
      "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape_repr(shape) + ", }";
  // numpy leaves room for the first axis to grow in place (np.lib.format.open_memmap).
  if (!shape.empty()) {
    size_t digits = std::to_string(shape[0]).size();
    if (digits < kGrowthAxisDigits) header.append(kGrowthAxisDigits - digits, ' ');
  }
  int major = 1;
  size_t prefix = kMagicLen + 2 + 2;
  if (header.size() + 1 + kAlign > 65535) {
    major = 2;
    prefix = kMagicLen + 2 + 4;
  }
  size_t pad = kAlign - (prefix + header.size() + 1) % kAlign;
  if (pad == kAlign) pad = 0;
  header.append(pad, ' ');
  header += '\n';

  std::string out(kMagic, kMagicLen);
  out += char(major);
  out += char(0);
  for (size_t i = 0; i < prefix - kMagicLen - 2; ++i)
    out += char((header.size() >> (8 * i)) & 0xff);
  out += header;

  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) return err(path, ": cannot open for writing");
  f.write(out.data(), std::streamsize(out.size()));
  f.write(reinterpret_cast<const char*>(data.data()), std::streamsize(data.size() * 4));
  f.close();
  if (!f) return err(path, ": write failed");
  return {};
}

}  // namespace orchid

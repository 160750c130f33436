// UTF-8 validation and lossy repair, the code-point class table and NFC. utf8proc (Unicode 15)
// provides the data; two small corrections make it agree with what Hugging Face tokenizers
// actually runs (both measured against it over every code point):
//  - its regex engine, Oniguruma, knows Unicode 16: the letters, digits and marks added since
//    15.0 are listed below (also used to bring PCRE2 10.42, Unicode 14, up to date);
//  - its NFC (unicode-normalization-alignments) uses Unicode 9 tables: marks that got a
//    non-zero combining class later count as starters, and U+11935 U+11930 (13.0) do not
//    compose.
#include "orchid/tokenizer/unicode.h"

#include <utf8proc.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <vector>

namespace orchid::unicode {
namespace {

struct Range {
  uint32_t lo, hi;
};

// Letters, digits and marks assigned in Unicode 15.0-16.0. Oniguruma (Unicode 16) has them;
// utf8proc 2.8 lacks the 16.0 ones and PCRE2 10.42 (Unicode 14) all of them.
constexpr Range kRecentLetters[] = {
    {0x1C89, 0x1C8A},   {0xA7CB, 0xA7CD},   {0xA7DA, 0xA7DC},   {0x105C0, 0x105F3},
    {0x10D4A, 0x10D65}, {0x10D6F, 0x10D85}, {0x10EC2, 0x10EC4}, {0x1123F, 0x11240},
    {0x11380, 0x11389}, {0x1138B, 0x1138B}, {0x1138E, 0x1138E}, {0x11390, 0x113B5},
    {0x113B7, 0x113B7}, {0x113D1, 0x113D1}, {0x113D3, 0x113D3}, {0x11BC0, 0x11BE0},
    {0x11F02, 0x11F02}, {0x11F04, 0x11F10}, {0x11F12, 0x11F33}, {0x1342F, 0x1342F},
    {0x13441, 0x13446}, {0x13460, 0x143FA}, {0x16100, 0x1611D}, {0x16D40, 0x16D6C},
    {0x18CFF, 0x18CFF}, {0x1B132, 0x1B132}, {0x1B155, 0x1B155}, {0x1DF25, 0x1DF2A},
    {0x1E030, 0x1E06D}, {0x1E4D0, 0x1E4EB}, {0x1E5D0, 0x1E5ED}, {0x1E5F0, 0x1E5F0},
    {0x2B739, 0x2B739}, {0x2EBF0, 0x2EE5D}, {0x31350, 0x323AF}};
constexpr Range kRecentNumbers[] = {{0x10D40, 0x10D49}, {0x116D0, 0x116E3}, {0x11BF0, 0x11BF9},
                                    {0x11F50, 0x11F59}, {0x16130, 0x16139}, {0x16D70, 0x16D79},
                                    {0x1CCF0, 0x1CCF9}, {0x1D2C0, 0x1D2D3}, {0x1E4F0, 0x1E4F9},
                                    {0x1E5F1, 0x1E5FA}};
constexpr Range kRecentMarks[] = {
    {0x897, 0x897},     {0xCF3, 0xCF3},     {0xECE, 0xECE},     {0x10D69, 0x10D6D},
    {0x10EFC, 0x10EFF}, {0x11241, 0x11241}, {0x113B8, 0x113C0}, {0x113C2, 0x113C2},
    {0x113C5, 0x113C5}, {0x113C7, 0x113CA}, {0x113CC, 0x113D0}, {0x113D2, 0x113D2},
    {0x113E1, 0x113E2}, {0x11F00, 0x11F01}, {0x11F03, 0x11F03}, {0x11F34, 0x11F3A},
    {0x11F3E, 0x11F42}, {0x11F5A, 0x11F5A}, {0x13440, 0x13440}, {0x13447, 0x13455},
    {0x1611E, 0x1612F}, {0x1E08F, 0x1E08F}, {0x1E4EC, 0x1E4EF}, {0x1E5EE, 0x1E5EF}};

// Marks with a non-zero canonical combining class since Unicode 10..15: unknown to the
// Unicode 9 NFC tables of the tokenizers crate, hence starters (class 0) there.
constexpr Range kNewCombiningMarks[] = {
    {0x7FD, 0x7FD},     {0x898, 0x89F},     {0x8CA, 0x8D3},     {0x9FE, 0x9FE},
    {0xC3C, 0xC3C},     {0xD3B, 0xD3C},     {0xEBA, 0xEBA},     {0x1715, 0x1715},
    {0x1ABF, 0x1ACE},   {0x1DF6, 0x1DFA},   {0xA82C, 0xA82C},   {0x10D24, 0x10D27},
    {0x10EAB, 0x10EAC}, {0x10EFD, 0x10EFF}, {0x10F46, 0x10F50}, {0x10F82, 0x10F85},
    {0x11070, 0x11070}, {0x1133B, 0x1133B}, {0x1145E, 0x1145E}, {0x11839, 0x1183A},
    {0x1193D, 0x1193E}, {0x11943, 0x11943}, {0x119E0, 0x119E0}, {0x11A34, 0x11A34},
    {0x11A47, 0x11A47}, {0x11A99, 0x11A99}, {0x11D42, 0x11D42}, {0x11D44, 0x11D45},
    {0x11D97, 0x11D97}, {0x11F41, 0x11F42}, {0x16FF0, 0x16FF1}, {0x1E08F, 0x1E08F},
    {0x1E130, 0x1E136}, {0x1E2AE, 0x1E2AE}, {0x1E2EC, 0x1E2EF}, {0x1E4EC, 0x1E4EF}};
// The second half of the one canonical composition added after Unicode 9 (U+11938).
constexpr uint32_t kNewCompositionSecond = 0x11930;

// White_Space: the set both Oniguruma's \s and Rust's char::is_whitespace use.
constexpr Range kWhiteSpace[] = {
    {0x9, 0xD},       {0x20, 0x20},     {0x85, 0x85},     {0xA0, 0xA0},     {0x1680, 0x1680},
    {0x2000, 0x200A}, {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}};

template <size_t N>
bool in(const Range (&ranges)[N], uint32_t cp) {
  for (const Range& r : ranges)
    if (cp >= r.lo && cp <= r.hi) return true;
  return false;
}

bool is_surrogate(uint32_t cp) {
  return cp >= 0xD800 && cp <= 0xDFFF;
}
// Hangul medial vowels and final consonants compose algorithmically with what precedes them.
bool is_hangul_vt(uint32_t cp) {
  return (cp >= 0x1161 && cp <= 0x1175) || (cp >= 0x11A8 && cp <= 0x11C2);
}

// Canonical combining class as the tokenizers crate's NFC sees it.
int combining_class(uint32_t cp) {
  if (in(kNewCombiningMarks, cp)) return 0;
  return utf8proc_get_property(static_cast<utf8proc_int32_t>(cp))->combining_class;
}

// Full canonical decomposition of cp into out (returns the count, <= cap).
int decompose(uint32_t cp, utf8proc_int32_t* out, int cap) {
  int boundclass = 0;
  utf8proc_ssize_t n = utf8proc_decompose_char(static_cast<utf8proc_int32_t>(cp), out, cap,
                                               UTF8PROC_DECOMPOSE, &boundclass);
  return n < 0 ? 0 : static_cast<int>(std::min<utf8proc_ssize_t>(n, cap));
}

// Composition of the decomposed, reordered code points buf[0..n) to UTF-8, appended to out.
void compose_append(std::vector<utf8proc_int32_t>& buf, size_t n, std::string& out) {
  utf8proc_ssize_t bytes =
      utf8proc_reencode(buf.data(), static_cast<utf8proc_ssize_t>(n),
                        static_cast<utf8proc_option_t>(UTF8PROC_COMPOSE | UTF8PROC_STABLE));
  if (bytes < 0) {  // cannot happen for valid scalar values; keep the decomposed text
    for (size_t i = 0; i < n; ++i) append_utf8(static_cast<uint32_t>(buf[i]), out);
    return;
  }
  out.append(reinterpret_cast<const char*>(buf.data()), static_cast<size_t>(bytes));
}

// NFC of one window (it starts at an NFC-inert character or at the text start and contains no
// other inert character): decompose, order marks by combining class (stable), compose.
void normalize_window(std::string_view w, std::string& out) {
  thread_local std::vector<utf8proc_int32_t> buf;
  size_t n = 0;
  for (size_t i = 0; i < w.size();) {
    int len;
    uint32_t cp = decode_utf8(w.data() + i, len);
    i += size_t(len);
    if (buf.size() < n + 32) buf.resize(buf.size() * 2 + 64);  // a decomposition is <= 32
    n += size_t(decompose(cp, buf.data() + n, 32));
  }
  // Canonical ordering: insertion sort of each run of non-starters by combining class.
  for (size_t i = 1; i < n; ++i) {
    int c = combining_class(uint32_t(buf[i]));
    if (c == 0) continue;
    for (size_t j = i; j > 0; --j) {
      int p = combining_class(uint32_t(buf[j - 1]));
      if (p == 0 || p <= c) break;
      std::swap(buf[j - 1], buf[j]);
    }
  }
  compose_append(buf, n, out);
}

}  // namespace

void append_utf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

namespace {

// Well-formed UTF-8 (Unicode Table 3-7): for a lead byte, the range its second byte must lie
// in and the total length; later bytes are always 80..BF.
struct Lead {
  unsigned char lo, hi;
  int len;
};
Lead lead_of(unsigned char b) {
  if (b >= 0xC2 && b <= 0xDF) return {0x80, 0xBF, 2};
  if (b == 0xE0) return {0xA0, 0xBF, 3};
  if (b == 0xED) return {0x80, 0x9F, 3};
  if (b >= 0xE1 && b <= 0xEF) return {0x80, 0xBF, 3};
  if (b == 0xF0) return {0x90, 0xBF, 4};
  if (b >= 0xF1 && b <= 0xF3) return {0x80, 0xBF, 4};
  if (b == 0xF4) return {0x80, 0x8F, 4};
  return {0, 0, 0};  // 80..C1, F5..FF never start a sequence
}

// Bytes of the longest prefix of a well-formed sequence at s[0..n) (>= 1 for any lead byte,
// 0 for a byte that cannot start one), and whether that prefix is the whole sequence.
int maximal_prefix(const unsigned char* s, size_t n, bool& complete) {
  complete = false;
  Lead l = lead_of(s[0]);
  if (l.len == 0) return 0;
  int k = 1;
  for (; k < l.len; ++k) {
    if (size_t(k) >= n) return k;
    unsigned char lo = k == 1 ? l.lo : 0x80, hi = k == 1 ? l.hi : 0xBF;
    if (s[k] < lo || s[k] > hi) return k;
  }
  complete = true;
  return k;
}

}  // namespace

int valid_sequence_length(const unsigned char* s, size_t n) {
  if (n == 0) return 0;
  if (s[0] < 0x80) return 1;
  bool complete;
  int k = maximal_prefix(s, n, complete);
  return complete ? k : 0;
}

size_t valid_utf8_prefix(std::string_view s) {
  const auto* u = reinterpret_cast<const unsigned char*>(s.data());
  size_t n = s.size(), i = 0;
  while (i < n) {
    // ASCII runs eight bytes at a time.
    while (i + 8 <= n) {
      uint64_t w;
      std::memcpy(&w, u + i, 8);
      if (w & 0x8080808080808080ull) break;
      i += 8;
    }
    if (i >= n) break;
    unsigned char b = u[i];
    if (b < 0x80) {
      ++i;
      continue;
    }
    // The common well-formed cases inline; anything unusual through the table.
    if (b >= 0xC2 && b <= 0xDF && i + 1 < n && (u[i + 1] & 0xC0) == 0x80) {
      i += 2;
      continue;
    }
    if (b >= 0xE1 && b <= 0xEC && i + 2 < n && (u[i + 1] & 0xC0) == 0x80 &&
        (u[i + 2] & 0xC0) == 0x80) {
      i += 3;
      continue;
    }
    int len = valid_sequence_length(u + i, n - i);
    if (len == 0) return i;
    i += size_t(len);
  }
  return n;
}

bool is_valid_utf8(std::string_view s) {
  return valid_utf8_prefix(s) == s.size();
}

void append_utf8_lossy(std::string_view s, std::string& out) {
  const auto* u = reinterpret_cast<const unsigned char*>(s.data());
  size_t n = s.size(), run = 0;  // s[run..i) is valid and not yet appended
  size_t i = valid_utf8_prefix(s);
  while (i < n) {
    size_t good = valid_utf8_prefix(s.substr(i));
    i += good;
    if (i >= n) break;
    bool complete;
    int k = maximal_prefix(u + i, n - i, complete);
    out.append(s.data() + run, i - run);
    out += "\xEF\xBF\xBD";
    i += size_t(std::max(k, 1));
    run = i;
  }
  out.append(s.data() + run, n - run);
}

size_t incomplete_utf8_tail(std::string_view s) {
  const auto* u = reinterpret_cast<const unsigned char*>(s.data());
  size_t n = s.size();
  for (size_t k = 1; k <= 3 && k <= n; ++k) {
    unsigned char b = u[n - k];
    if (b >= 0x80 && b < 0xC0) continue;  // continuation byte: look further back
    bool complete;
    int got = maximal_prefix(u + n - k, k, complete);
    return (!complete && size_t(got) == k) ? k : 0;
  }
  return 0;
}

// ---- Character table -------------------------------------------------------------------------

const CharTable& CharTable::get() {
  static const CharTable table;
  return table;
}

CharTable::CharTable() {
  constexpr uint32_t kCount = 0x110000;
  std::vector<uint8_t> flat(kCount, 0);
  std::vector<uint32_t> decomposable;  // code points with a canonical decomposition
  for (uint32_t cp = 0; cp < kCount; ++cp) {
    if (is_surrogate(cp)) continue;
    const utf8proc_property_t* p = utf8proc_get_property(static_cast<utf8proc_int32_t>(cp));
    int cat = p->category;
    uint8_t f = 0;
    if (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO) f |= kLetter;
    if (cat >= UTF8PROC_CATEGORY_ND && cat <= UTF8PROC_CATEGORY_NO) f |= kNumber;
    if (cat >= UTF8PROC_CATEGORY_MN && cat <= UTF8PROC_CATEGORY_ME) f |= kMark;
    if (p->combining_class != 0) f |= kNfcActive;
    if (p->decomp_seqindex != UINT16_MAX && p->decomp_type == 0) decomposable.push_back(cp);
    flat[cp] = f;
  }
  auto set = [&](const auto& ranges, uint8_t bit) {
    for (const Range& r : ranges)
      for (uint32_t cp = r.lo; cp <= r.hi; ++cp) flat[cp] |= bit;
  };
  set(kRecentLetters, kLetter);
  set(kRecentNumbers, kNumber);
  set(kRecentMarks, kMark);
  set(kWhiteSpace, kSpace);
  for (const Range& r : kNewCombiningMarks)  // starters for the tokenizers crate's NFC
    for (uint32_t cp = r.lo; cp <= r.hi; ++cp) flat[cp] &= uint8_t(~kNfcActive);

  // NFC-active = not a "stable" code point (combining class 0 and NFC_QC=Yes), so NFC may change
  // it or its neighbours: a non-zero class (above), a possible composition second (any code
  // point after the first position of a canonical decomposition: a superset, which only sends
  // more text down the slow path; Hangul vowels/finals compose algorithmically), or a
  // decomposable character that NFC does not give back unchanged. Precomposed Hangul syllables
  // are stable. U+11930 composes only in Unicode 13+, unknown to the tokenizers crate.
  std::string one;
  for (uint32_t cp : decomposable) {
    utf8proc_int32_t d[32];
    int n = decompose(cp, d, 32);
    for (int i = 1; i < n; ++i)
      if (uint32_t(d[i]) != kNewCompositionSecond) flat[size_t(d[i])] |= kNfcActive;
    one.clear();
    append_utf8(cp, one);
    utf8proc_uint8_t* nfc = utf8proc_NFC(reinterpret_cast<const utf8proc_uint8_t*>(one.c_str()));
    if (nfc == nullptr || one != reinterpret_cast<const char*>(nfc)) flat[cp] |= kNfcActive;
    std::free(nfc);
  }
  for (uint32_t cp = 0; cp < kCount; ++cp)
    if (is_hangul_vt(cp)) flat[cp] |= kNfcActive;

  for (uint32_t cp = 0; cp < 0x10000; ++cp)
    if (flat[cp] & kNfcActive) bmp_nfc_active_[cp >> 6] |= uint64_t(1) << (cp & 63);

  // Share identical 256-entry blocks.
  std::map<std::basic_string<uint8_t>, uint16_t> seen;
  for (uint32_t b = 0; b < (kCount >> 8); ++b) {
    std::basic_string<uint8_t> block(flat.data() + (size_t(b) << 8), 256);
    auto [it, inserted] = seen.emplace(block, uint16_t(seen.size()));
    if (inserted) blocks_ += block;
    index_[b] = it->second;
  }
}

bool is_word_char(uint32_t cp) {
  if (cp == '_' || cp == 0x200C || cp == 0x200D) return true;
  // Other_Alphabetic symbols: circled and squared Latin letters.
  if ((cp >= 0x24B6 && cp <= 0x24E9) || (cp >= 0x1F130 && cp <= 0x1F149) ||
      (cp >= 0x1F150 && cp <= 0x1F169) || (cp >= 0x1F170 && cp <= 0x1F189))
    return true;
  if (CharTable::get().flags(cp) & (kLetter | kMark)) return true;
  int cat = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  return cat == UTF8PROC_CATEGORY_ND || cat == UTF8PROC_CATEGORY_NL || cat == UTF8PROC_CATEGORY_PC;
}

template <size_t N>
std::string pcre2_ranges(const Range (&ranges)[N]) {
  std::string s;
  char buf[40];
  for (const Range& r : ranges) {
    std::snprintf(buf, sizeof buf, "\\x{%X}-\\x{%X}", unsigned(r.lo), unsigned(r.hi));
    s += buf;
  }
  return s;
}

std::string recent_ranges_pcre2(CharFlag flag) {
  switch (flag) {
    case kLetter:
      return pcre2_ranges(kRecentLetters);
    case kNumber:
      return pcre2_ranges(kRecentNumbers);
    case kMark:
      return pcre2_ranges(kRecentMarks);
    case kSpace:
      return pcre2_ranges(kWhiteSpace);
    default:
      return "";
  }
}

// ---- NFC -------------------------------------------------------------------------------------

bool nfc_quick_check(std::string_view s) {
  const CharTable& t = CharTable::get();
  for (size_t i = 0; i < s.size();) {
    // Everything below U+0300 (lead bytes < 0xCC) is stable.
    if (static_cast<unsigned char>(s[i]) < 0xCC) {
      ++i;
      continue;
    }
    int len;
    uint32_t cp = decode_utf8(s.data() + i, len);
    if (t.nfc_active(cp)) return false;
    i += size_t(len);
  }
  return true;
}

void append_nfc(std::string_view s, std::string& out) {
  const CharTable& t = CharTable::get();
  size_t n = s.size(), i = 0;
  size_t copied = 0;      // s[0..copied) is already in out
  size_t last_start = 0;  // start of the last stable character seen (a window may begin there)
  while (i < n) {
    auto b = static_cast<unsigned char>(s[i]);
    if (b < 0xCC) {  // below U+0300, or a continuation byte (only reached at a char start)
      last_start = i;
      i += b < 0x80 ? 1 : 2;
      continue;
    }
    int len;
    uint32_t cp = decode_utf8(s.data() + i, len);
    if (!t.nfc_active(cp)) {
      last_start = i;
      i += size_t(len);
      continue;
    }
    // The window: from the preceding stable character to the next stable one.
    size_t w0 = std::max(last_start, copied);
    size_t j = i + size_t(len);
    while (j < n) {
      uint32_t c = decode_utf8(s.data() + j, len);
      if (c < 0x300 || !t.nfc_active(c)) break;
      j += size_t(len);
    }
    out.append(s.data() + copied, w0 - copied);
    normalize_window(s.substr(w0, j - w0), out);
    copied = i = last_start = j;
  }
  out.append(s.data() + copied, n - copied);
}

}  // namespace orchid::unicode

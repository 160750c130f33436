// Split pre-tokenizer: recognises the two Qwen patterns by exact string, runs anything else on
// PCRE2 (UTF + UCP, JIT-compiled when available; \p{L}/\p{N}/\p{M}/\s brought to Oniguruma's
// Unicode 16 sets), and splits on literal strings.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "orchid/tokenizer/pretokenizer.h"

#include <pcre2.h>

#include "orchid/tokenizer/unicode.h"

namespace orchid {

const char* const PreTokenizer::kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const PreTokenizer::kQwen35Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

struct PreTokenizer::Regex {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Regex() { pcre2_code_free(code); }
};

namespace {

// Per-thread PCRE2 match state: match data and a JIT stack large enough for long whitespace
// runs under \s+(?!\S). Not tied to one pattern.
struct PcreThreadState {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  pcre2_jit_stack* stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
  PcreThreadState() {
    if (context && stack) pcre2_jit_stack_assign(context, nullptr, stack);
  }
  ~PcreThreadState() {
    pcre2_jit_stack_free(stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
};

PcreThreadState& pcre_state() {
  thread_local PcreThreadState state;
  return state;
}

// Rewrites \p{L} \p{N} \p{M} (and \pL ...) to include the code points PCRE2's older Unicode
// tables lack, and \s / \S (outside classes) to White_Space exactly, so the generic path
// classifies characters as Oniguruma does. Negated \P{..} and \S inside a class are kept.
std::string adapt_pattern(const std::string& p) {
  const std::string space = unicode::recent_ranges_pcre2(unicode::kSpace);
  std::string out;
  bool in_class = false;
  size_t n = p.size();
  for (size_t i = 0; i < n; ++i) {
    char c = p[i];
    if (c == '\\' && i + 1 < n) {
      char e = p[i + 1];
      if (e == 'p' || e == 'P') {
        size_t end = i + 2;
        std::string name;
        if (end < n && p[end] == '{') {
          size_t close = p.find('}', end);
          if (close == std::string::npos) return p;  // let PCRE2 report it
          name = p.substr(end + 1, close - end - 1);
          end = close + 1;
        } else if (end < n) {
          name = p.substr(end, 1);
          end += 1;
        }
        std::string original = p.substr(i, end - i);
        unicode::CharFlag flag = name == "L"   ? unicode::kLetter
                                 : name == "N" ? unicode::kNumber
                                 : name == "M" ? unicode::kMark
                                               : unicode::CharFlag(0);
        if (flag == 0 || (e == 'P' && in_class)) {
          out += original;
        } else {
          std::string body = "\\p{" + name + "}" + unicode::recent_ranges_pcre2(flag);
          out += in_class ? body : (e == 'p' ? "[" : "[^") + body + "]";
        }
        i = end - 1;
        continue;
      }
      if (e == 's' || (e == 'S' && !in_class)) {
        out += in_class ? space : (e == 's' ? "[" : "[^") + space + "]";
        ++i;
        continue;
      }
      out += c;
      out += e;
      ++i;
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal.
      if (i + 1 < n && p[i + 1] == '^') out += p[++i];
      if (i + 1 < n && p[i + 1] == ']') out += p[++i];
      continue;
    }
    if (in_class && c == '[' && i + 1 < n && p[i + 1] == ':') {  // [:alpha:]
      size_t close = p.find(":]", i + 2);
      if (close != std::string::npos) {
        out.append(p, i, close + 2 - i);
        i = close + 1;
        continue;
      }
    }
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  return out;
}

}  // namespace

PreTokenizer::PreTokenizer(PreTokenizer&&) noexcept = default;
PreTokenizer& PreTokenizer::operator=(PreTokenizer&&) noexcept = default;
PreTokenizer::~PreTokenizer() = default;

PreTokenizer PreTokenizer::whole() {
  return PreTokenizer();
}

Expected<PreTokenizer> PreTokenizer::split(const std::string& pattern, bool is_regex) {
  PreTokenizer p;
  if (!is_regex) {
    p.engine_ = Engine::literal;
    p.literal_ = pattern;
    return p;
  }
  if (pattern == kQwen2Pattern) {
    p.engine_ = Engine::qwen2;
    return p;
  }
  if (pattern == kQwen35Pattern) {
    p.engine_ = Engine::qwen35;
    return p;
  }
  int code = 0;
  PCRE2_SIZE offset = 0;
  // Compile the original first so a syntax error's offset refers to the user's pattern.
  pcre2_code* re = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                 PCRE2_UTF | PCRE2_UCP, &code, &offset, nullptr);
  if (re) {
    pcre2_code_free(re);
    std::string adapted = adapt_pattern(pattern);
    re = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(adapted.data()), adapted.size(),
                       PCRE2_UTF | PCRE2_UCP, &code, &offset, nullptr);
  }
  if (!re) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(code, msg, sizeof msg);
    return err("bad Split regex at offset ", size_t(offset), ": ",
               reinterpret_cast<const char*>(msg), " (pattern ", pattern, ")");
  }
  p.engine_ = Engine::regex;
  p.regex_ = std::make_unique<Regex>();
  p.regex_->code = re;
  p.regex_->jit = pcre2_jit_compile(re, PCRE2_JIT_COMPLETE) == 0;
  return p;
}

size_t PreTokenizer::run(std::string_view text, size_t pos,
                         std::vector<std::string_view>& out) const {
  const size_t n = text.size();
  if (pos >= n) return n;
  switch (engine_) {
    case Engine::qwen2:
    case Engine::qwen35:
      return split_qwen(text, pos, engine_ == Engine::qwen35, kBatch, out);
    case Engine::none:
      out.push_back(text.substr(pos));
      return n;
    case Engine::literal: {
      for (size_t count = 0; pos < n && count < kBatch; count += 2) {
        size_t at = literal_.empty() ? std::string_view::npos : text.find(literal_, pos);
        if (at == std::string_view::npos) {
          out.push_back(text.substr(pos));
          return n;
        }
        if (at > pos) out.push_back(text.substr(pos, at - pos));
        out.push_back(text.substr(at, literal_.size()));
        pos = at + literal_.size();
      }
      return pos;
    }
    case Engine::regex:
      break;
  }
  // Oniguruma-style find_iter: matches and the gaps between them are words; after an empty
  // match the search resumes one character later. A batch ends right after a non-empty match.
  PcreThreadState& st = pcre_state();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t prev = pos;
  for (size_t count = 0; pos <= n && count < kBatch;) {
    int rc = regex_->jit ? pcre2_jit_match(regex_->code, subject, n, pos, 0, st.data, st.context)
                         : pcre2_match(regex_->code, subject, n, pos, PCRE2_NO_UTF_CHECK, st.data,
                                       st.context);
    if (rc < 0) break;  // no match, or a resource limit: the rest stays one word
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(st.data);
    size_t s = ov[0], e = ov[1];
    if (s > prev) out.push_back(text.substr(prev, s - prev));
    if (e > s) {
      out.push_back(text.substr(s, e - s));
      prev = pos = e;
      count += 2;
      if (count >= kBatch && e < n) return e;
    } else {
      prev = s;
      if (e >= n) break;
      int len = 1;
      if (static_cast<unsigned char>(text[e]) >= 0x80) unicode::decode_utf8(text.data() + e, len);
      pos = e + size_t(len);
    }
  }
  if (prev < n) out.push_back(text.substr(prev));
  return n;
}

}  // namespace orchid

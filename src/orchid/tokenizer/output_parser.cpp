// Incremental reasoning / content / tool-call split of a Qwen reply (rules in output_parser.h).
#include "orchid/tokenizer/output_parser.h"

#include <algorithm>
#include <memory>
#include <random>
#include <utility>

#include "orchid/tokenizer/tool_args.h"

namespace orchid {

namespace {

constexpr std::string_view kWs = " \t\r\n";
constexpr std::string_view kThinkOpen = "<think>";
constexpr std::string_view kThinkClose = "</think>";
constexpr std::string_view kCallOpen = "<tool_call>";
constexpr std::string_view kCallClose = "</tool_call>";
constexpr std::string_view kFunctionOpen = "<function=";
constexpr std::string_view kParamOpen = "<parameter=";
constexpr std::string_view kParamClose = "</parameter>";

// Bytes at the end of s that start a valid UTF-8 sequence not yet complete (0..3).
size_t utf8_incomplete_tail(std::string_view s) {
  size_t n = s.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    auto c = static_cast<unsigned char>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: look further back for the lead
    size_t need = 0;
    if (c >= 0xC2 && c <= 0xDF) need = 2;
    if (c >= 0xE0 && c <= 0xEF) need = 3;
    if (c >= 0xF0 && c <= 0xF4) need = 4;
    if (need <= back) return 0;  // ASCII, invalid lead, or a complete sequence
    if (back >= 2) {             // the second byte's range depends on the lead (RFC 3629)
      auto c1 = static_cast<unsigned char>(s[n - back + 1]);
      if ((c == 0xE0 && c1 < 0xA0) || (c == 0xED && c1 > 0x9F) || (c == 0xF0 && c1 < 0x90) ||
          (c == 0xF4 && c1 > 0x8F))
        return 0;
    }
    return back;
  }
  return 0;
}

}  // namespace

std::function<std::string()> seeded_tool_call_ids(uint64_t seed) {
  auto rng = std::make_shared<std::mt19937_64>(seed);
  return [rng] {
    static constexpr char kAlnum[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    std::uniform_int_distribution<int> pick(0, int(sizeof(kAlnum)) - 2);
    std::string id = "call_";
    for (int i = 0; i < 24; ++i) id += kAlnum[pick(*rng)];
    return id;
  };
}

OutputParser::OutputParser(OutputParserOptions opts)
    : opts_(std::move(opts)), mode_(opts_.thinking ? Mode::kReasoning : Mode::kContent) {
  if (!opts_.make_call_id) {
    std::random_device rd;
    opts_.make_call_id = seeded_tool_call_ids((uint64_t(rd()) << 32) ^ rd());
  }
}

ParserDelta OutputParser::push(std::string_view text) {
  ParserDelta out;
  buf_.append(text);
  run(/*at_end=*/false, out);
  return out;
}

ParserDelta OutputParser::finish() {
  ParserDelta out;
  run(/*at_end=*/true, out);
  if (mode_ == Mode::kContent) out.content += ws_;  // trailing WS of the reply is kept
  ws_.clear();
  return out;
}

// Classifies the '<' at buf_[pos]. kNeedMore: the text so far is a proper prefix of a tag or
// of a tool-call start, so the next bytes decide (never returned at the end of the reply).
OutputParser::Match OutputParser::match_tag(size_t pos, bool at_end) const {
  std::string_view rest = std::string_view(buf_).substr(pos);
  bool prefix = false;
  for (std::string_view tag : {kThinkOpen, kThinkClose, kCallOpen, kCallClose}) {
    if (!rest.starts_with(tag)) {
      prefix = prefix || (rest.size() < tag.size() && tag.starts_with(rest));
      continue;
    }
    const Match other{TagMatch::kOtherTag, tag.size()};
    const Match need_more = at_end ? other : Match{TagMatch::kNeedMore, 0};
    if (tag == kThinkOpen)
      return section_start_ && first_section_ ? Match{TagMatch::kThinkOpen, tag.size()} : other;
    if (tag == kThinkClose)
      return mode_ == Mode::kReasoning ? Match{TagMatch::kThinkClose, tag.size()} : other;
    if (tag == kCallOpen && opts_.parse_tool_calls) {
      // A tool call only if WS* "<function=" follows; otherwise the tag is text.
      size_t p = rest.find_first_not_of(kWs, tag.size());
      if (p == std::string_view::npos) return need_more;
      std::string_view after = rest.substr(p);
      if (after.starts_with(kFunctionOpen)) return Match{TagMatch::kCallStart, tag.size()};
      if (kFunctionOpen.starts_with(after)) return need_more;
    }
    return other;
  }
  return Match{prefix && !at_end ? TagMatch::kNeedMore : TagMatch::kNone, 0};
}

// Appends reasoning or content text, applying the WS rules: leading WS of a section is
// dropped, trailing WS is held in ws_ until more text shows it is not the section's end.
void OutputParser::emit_text(std::string_view text, ParserDelta& out) {
  if (text.empty()) return;
  std::string& dst = mode_ == Mode::kReasoning ? out.reasoning : out.content;
  size_t last = text.find_last_not_of(kWs);
  if (last == std::string_view::npos) {
    if (!section_start_) ws_.append(text);
    return;
  }
  if (section_start_) {
    size_t first = text.find_first_not_of(kWs);
    text.remove_prefix(first);
    last -= first;
    section_start_ = false;
  } else {
    dst += ws_;
  }
  dst.append(text.substr(0, last + 1));
  ws_.assign(text.substr(last + 1));
}

// Index just past the block's closing </tool_call> in call_raw_, or npos if not there yet.
// Scans incrementally: call_scan_ and call_in_value_ carry over between pushes.
size_t OutputParser::find_call_end() {
  const std::string& raw = call_raw_;
  auto back_off = [&](size_t keep) {  // a tag may have started in the last keep-1 bytes
    if (raw.size() >= keep) call_scan_ = std::max(call_scan_, raw.size() - keep + 1);
  };
  while (true) {
    if (call_in_value_) {
      size_t close = raw.find(kParamClose, call_scan_);
      if (close == std::string::npos) {
        back_off(kParamClose.size());
        return std::string::npos;
      }
      call_scan_ = close + kParamClose.size();
      call_in_value_ = false;
      continue;
    }
    size_t param = raw.find(kParamOpen, call_scan_);
    size_t end = raw.find(kCallClose, call_scan_);
    if (end != std::string::npos && (param == std::string::npos || end < param))
      return end + kCallClose.size();
    if (param == std::string::npos) {
      back_off(std::max(kParamOpen.size(), kCallClose.size()));
      return std::string::npos;
    }
    size_t gt = raw.find('>', param + kParamOpen.size());
    if (gt == std::string::npos) {
      call_scan_ = param;
      return std::string::npos;
    }
    call_scan_ = gt + 1;
    call_in_value_ = true;
  }
}

// The block in call_raw_ is complete (closed) or cut by the end of the reply: a call, or
// content text exactly as written.
void OutputParser::end_call(bool closed, ParserDelta& out) {
  mode_ = Mode::kContent;
  if (closed) {
    std::string_view body = std::string_view(call_raw_).substr(
        kCallOpen.size(), call_raw_.size() - kCallOpen.size() - kCallClose.size());
    auto parsed = parse_tool_call_xml(body);
    if (parsed) {
      out.tool_calls.push_back(
          ToolCall{opts_.make_call_id(), parsed->name, tool_arguments_json(*parsed, opts_.tools)});
      section_start_ = true;
      ws_.clear();
      call_raw_.clear();
      return;
    }
  }
  section_start_ = false;
  ws_ = std::move(call_ws_);
  call_ws_.clear();
  emit_text(call_raw_, out);
  call_raw_.clear();
}

void OutputParser::run(bool at_end, ParserDelta& out) {
  size_t pos = 0;
  while (true) {
    if (mode_ == Mode::kToolCall) {
      call_raw_.append(buf_, pos);
      buf_.clear();
      pos = 0;
      size_t end = find_call_end();
      if (end == std::string::npos) {
        if (!at_end) break;
        end_call(/*closed=*/false, out);
        continue;
      }
      buf_.assign(call_raw_, end);  // what follows the block is parsed again as content
      call_raw_.resize(end);
      end_call(/*closed=*/true, out);
      continue;
    }
    if (pos >= buf_.size()) break;
    size_t lt = buf_.find('<', pos);
    if (lt != pos) {
      size_t stop = lt == std::string::npos ? buf_.size() : lt;
      if (lt == std::string::npos && !at_end)
        stop -= utf8_incomplete_tail(std::string_view(buf_).substr(pos, stop - pos));
      emit_text(std::string_view(buf_).substr(pos, stop - pos), out);
      pos = stop;
      if (lt == std::string::npos) break;
      continue;
    }
    Match m = match_tag(pos, at_end);
    switch (m.kind) {
      case TagMatch::kNeedMore:
        buf_.erase(0, pos);
        return;
      case TagMatch::kNone:
        emit_text("<", out);
        pos += 1;
        break;
      case TagMatch::kOtherTag:
        emit_text(std::string_view(buf_).substr(pos, m.len), out);
        pos += m.len;
        break;
      case TagMatch::kThinkOpen:  // dropped; in content it opens reasoning
        mode_ = Mode::kReasoning;
        section_start_ = true;
        pos += m.len;
        break;
      case TagMatch::kThinkClose:
        ws_.clear();
        mode_ = Mode::kContent;
        section_start_ = true;
        first_section_ = false;
        pos += m.len;
        break;
      case TagMatch::kCallStart:
        call_ws_ = mode_ == Mode::kContent ? std::move(ws_) : std::string();
        ws_.clear();
        call_raw_.assign(buf_, pos, m.len);
        call_scan_ = m.len;
        call_in_value_ = false;
        mode_ = Mode::kToolCall;
        first_section_ = false;
        pos += m.len;
        break;
    }
  }
  buf_.erase(0, pos);
}

}  // namespace orchid

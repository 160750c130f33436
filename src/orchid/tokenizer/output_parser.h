// Incremental parser of a Qwen3.5/3.6 reply into OpenAI fields: reasoning_content, content and
// tool_calls. Fed the detokenized text piece by piece while streaming; any cut gives the same
// result as the whole text.
//
// Rules. WS below is ASCII whitespace (' ', '\t', '\r', '\n'). A "tag" is one of the exact
// strings <think>, </think>, <tool_call>, </tool_call>.
//
// Sections. The reply is a sequence of sections: reasoning, content, tool calls.
//  - thinking = true (the prompt ends with "<think>\n"): the reply starts in reasoning, which
//    ends at the first </think>. A <think> before any reasoning text is dropped (older
//    templates let the model emit it). With no </think> ever, everything is reasoning (the
//    reply was cut by max_tokens), as vLLM's qwen3 reasoning parser does.
//  - thinking = false (the prompt holds "<think>\n\n</think>\n\n"): the reply is content;
//    but a <think> before any content text opens reasoning anyway, closed by </think>.
//  - Reasoning also ends, when tool calls are parsed, at a tool-call start (below): Qwen3.5
//    sometimes calls a tool from inside its thinking without closing it (vLLM does the same).
//  - Once reasoning has ended it never restarts: later <think>/</think> are content text.
//
// Whitespace is formatting where the template puts it, so it is dropped there:
//  - reasoning is trimmed at both ends (the template renders "<think>\n" R "\n</think>" and
//    trims R when re-rendering history);
//  - content drops WS at its start: the reply's start, after </think> (the template renders
//    "</think>\n\n") and after each tool call (calls are separated by "\n");
//  - content drops WS right before a tool call (the template renders "text\n\n<tool_call>").
//  Everything else is verbatim, including trailing WS of the content at the end of the reply.
//
// Tool calls (parse_tool_calls only). A tool call starts, in reasoning or content, at
// <tool_call> followed by optional WS and "<function="; a <tool_call> followed by anything else
// is text. The block then runs to the first </tool_call> that is not inside a parameter value
// (a value runs from "<parameter=NAME>" to the next </parameter>, so a value may hold the text
// "</tool_call>"). The block body is parsed by parse_tool_call_xml (tool_args.h) and the
// arguments typed by the tool's schema (type_param_value). A function name that is not in
// `tools` is still returned as a call, with string arguments, like vLLM's qwen3_coder parser:
// the server, not the parser, decides what to do with it. A block that fails to parse, or is
// still open at finish(), is put back verbatim as content (with the WS before it): nothing the
// model wrote is lost.
//
// Streaming. Text that may still become a tag or a tool-call start (a trailing "<", "</th",
// "<tool_call>\n<func", …) is held back until resolved, then released whole: as text once it
// cannot be a tag, so no delta ever ends inside a tag. WS that may be formatting is held until
// the next non-WS text. A trailing incomplete UTF-8 sequence is held, so no delta splits a
// character (invalid bytes pass through unchanged). A tool call is delivered complete, in the
// push that holds its </tool_call>. Within one delta, content and tool calls are separate
// fields; their relative order is not kept (OpenAI's message has no such order either).
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace orchid {

struct ToolCall {
  std::string id;         // "call_" + 24 alphanumerics unless OutputParserOptions says otherwise
  std::string name;       // function name as the model wrote it
  std::string arguments;  // JSON object text, e.g. {"city":"Paris","days":3}
};

// What became final with one push() or finish().
struct ParserDelta {
  std::string reasoning;             // reasoning_content text
  std::string content;               // visible content text
  std::vector<ToolCall> tool_calls;  // calls completed in this push, in order
  bool empty() const { return reasoning.empty() && content.empty() && tool_calls.empty(); }
};

struct OutputParserOptions {
  bool thinking = true;  // the prompt opened <think> (enable_thinking): output starts in reasoning
  // OpenAI tools: [{type:"function", function:{name, parameters:{type:"object", properties}}}]
  nlohmann::json tools = nlohmann::json::array();
  bool parse_tool_calls = true;  // false when tool_choice is "none" or no tools were given
  // Makes the id of each call; empty: "call_" + 24 random alphanumerics. Tests inject
  // seeded_tool_call_ids(seed) or a counter.
  std::function<std::string()> make_call_id;
};

// Ids "call_" + 24 alphanumerics from a generator seeded with `seed` (deterministic).
std::function<std::string()> seeded_tool_call_ids(uint64_t seed);

class OutputParser {
 public:
  explicit OutputParser(OutputParserOptions opts);

  // Feeds the next piece of the reply; any cut is allowed, even mid-UTF-8 or mid-tag.
  ParserDelta push(std::string_view text);
  // End of generation: resolves and flushes everything held back. Call once, last.
  ParserDelta finish();

 private:
  enum class Mode { kReasoning, kContent, kToolCall };
  enum class TagMatch { kNone, kNeedMore, kThinkOpen, kThinkClose, kCallStart, kOtherTag };
  struct Match {
    TagMatch kind;
    size_t len;
  };

  void run(bool at_end, ParserDelta& out);
  Match match_tag(size_t pos, bool at_end) const;
  void emit_text(std::string_view text, ParserDelta& out);
  size_t find_call_end();
  void end_call(bool closed, ParserDelta& out);

  OutputParserOptions opts_;
  Mode mode_;
  std::string buf_;            // input not yet consumed
  std::string ws_;             // WS held at the end of the current reasoning/content section
  bool section_start_ = true;  // no text yet in this section (its leading WS is dropped)
  bool first_section_ = true;  // no section has ended yet (a <think> may still open reasoning)
  // The tool-call block being read: raw text from "<tool_call>", and the scan state.
  std::string call_raw_;
  std::string call_ws_;  // WS that preceded the block in content; restored if it is malformed
  size_t call_scan_ = 0;
  bool call_in_value_ = false;
};

}  // namespace orchid

// What an answer must be beyond what the model chooses, as the three APIs ask for it:
// structured output (OpenAI response_format, Responses text.format) and forced tool calls
// (tool_choice "required" or a named function; Anthropic "any" or "tool"). The server turns it
// into a grammar (src/orchid/grammar) that constrained sampling enforces after the reasoning
// block.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "orchid/grammar/grammar.h"
#include "orchid/server/json_fields.h"
#include "orchid/util/status.h"

namespace orchid::server {

struct OutputConstraint {
  enum class Kind { none, json_object, json_schema, tool_call };
  Kind kind = Kind::none;
  OJson schema;           // json_schema: the schema
  std::string function;   // tool_call: the function that must be called; empty: any tool
  std::string param;      // the request field it came from, for errors
};

// OpenAI chat response_format: {type: text | json_object | json_schema, json_schema: {name,
// schema, strict}}.
ApiExpected<OutputConstraint> parse_response_format(const OJson& rf);
// Responses text.format: {type: text | json_object | json_schema, name, schema, strict}.
ApiExpected<OutputConstraint> parse_text_format(const OJson& format);
// tool_choice of chat ("none" | "auto" | "required" | {type: "function", function: {name}}) or
// of Responses (… | {type: "function", name}). `choice` receives "none", "auto" or
// "required"; a forced call sets `out` (a named one with its function).
Err parse_tool_choice(const OJson& tc, bool responses_shape, std::string& choice,
                      OutputConstraint& out);
// A forced call needs tools, and a named function must be one of them.
Err check_forced_call(const OutputConstraint& c, const OJson& tools);
// The grammar that enforces it (kind != none); an unsupported schema is an error saying why.
// tools: the request's OpenAI tools; parallel: a forced call may be followed by more.
Expected<grammar::Grammar> output_grammar(const OutputConstraint& c, const OJson& tools,
                                          bool parallel);

}  // namespace orchid::server

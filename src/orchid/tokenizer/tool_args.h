// Qwen's XML tool-call blocks → OpenAI function calls: parses the body of one
// `<tool_call>…</tool_call>` block and types each parameter value by the tool's JSON schema.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "orchid/util/status.h"

namespace orchid {

// One call as the model wrote it: the function name and the raw parameter texts, in order.
struct XmlToolCall {
  std::string name;
  std::vector<std::pair<std::string, std::string>> params;  // (name, raw value), in order
};

// Parses the text between `<tool_call>` and `</tool_call>` (exclusive). Grammar, where WS is
// any run of ' ', '\t', '\r', '\n':
//
//   WS <function=NAME> ( WS <parameter=PNAME> VALUE </parameter> )* WS [ </function> WS ]
//
// NAME / PNAME run to the next '>', are trimmed of spaces and must be non-empty and free of
// '<' and newlines. VALUE runs to the first `</parameter>` (so it may contain `</tool_call>`,
// `<parameter=`, …); one leading and one trailing '\n' are formatting (the template renders
// "<parameter=P>\nVALUE\n</parameter>") and are removed. A missing `</function>` is tolerated,
// like vLLM's qwen3_coder parser; anything else (other text between parameters, a second
// function, an unclosed parameter) is an error, so the caller can return the block verbatim.
Expected<XmlToolCall> parse_tool_call_xml(std::string_view body);

// The JSON schema of parameter `param` of function `function` in an OpenAI tools array
// ([{type:"function", function:{name, parameters:{type:"object", properties:{…}}}}]), or
// nullptr when the function or the parameter is not described.
const nlohmann::json* find_param_schema(const nlohmann::json& tools, std::string_view function,
                                        std::string_view param);

// Types one raw value by its schema. The schema permits a set of JSON types: from "type" (a
// string or an array of strings), else the union over "anyOf"/"oneOf" alternatives, else any
// type. "integer" values also satisfy "number".
//   - no schema (unknown function or parameter): the raw text as a string (vLLM qwen3_coder);
//   - only "string" permitted: the raw text as a string, always ("42" stays "42");
//   - "boolean" permitted and the trimmed text is true/false in any case: that boolean;
//   - the text parses as JSON (surrounding whitespace allowed) to a non-string value whose type
//     is permitted: that value (numbers, objects, arrays, null, lowercase booleans). "null" is
//     accepted for any non-string-only schema, as vLLM does, since the model writes it for an
//     omitted optional argument;
//   - otherwise the raw text as a string (never an error: the model's text is kept).
nlohmann::ordered_json type_param_value(const std::string& raw, const nlohmann::json* schema);

// The OpenAI `arguments` string of a call: a JSON object with the parameters in the order
// written (a repeated parameter keeps its first position and its last value), compact like
// OpenAI (`{"a":1,"b":"x"}`), non-ASCII kept as UTF-8 (invalid UTF-8 becomes U+FFFD).
std::string tool_arguments_json(const XmlToolCall& call, const nlohmann::json& tools);

}  // namespace orchid

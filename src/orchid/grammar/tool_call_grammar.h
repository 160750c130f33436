// The grammar of an answer that must call a tool (OpenAI tool_choice "required" or a named
// function, Anthropic "any" / "tool"): Qwen's XML tool-call blocks, as the chat template
// renders them, and nothing else:
//
//   <tool_call>\n<function=NAME>\n
//   <parameter=P>\nVALUE\n</parameter>\n      (each declared parameter, in the schema's order;
//   …                                          required ones always, optional ones may be left out)
//   </function>\n</tool_call>
//
// NAME is one of the tools (or the named one). A value whose schema admits a string is text
// without "</" or "<<" (so it cannot end its block early); any other value is JSON valid
// against its schema (json_schema.h), which is how the output parser types it. A function
// whose schema has no "properties" key (or an additionalProperties that allows them beside an
// empty one) takes any parameter names with text values; "properties": {} alone takes none.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "orchid/grammar/grammar.h"
#include "orchid/util/status.h"

namespace orchid::grammar {

// tools: the OpenAI tools array ([{type:"function", function:{name, parameters}}]).
// only: the function that must be called (empty: any of them). parallel: one call or more
// (else exactly one). An unknown `only` or an unsupported parameter schema is an error.
Expected<Grammar> tool_call_grammar(const nlohmann::ordered_json& tools, const std::string& only,
                                    bool parallel);

}  // namespace orchid::grammar

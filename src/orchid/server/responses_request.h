// OpenAI Responses API bodies (POST /v1/responses) → the chat path's ChatRequest plus what the
// answer echoes and what resumes a stored conversation. Pure functions of the body bytes.
//
// Mapping. `instructions` becomes the system message (not carried to a follow-up, as OpenAI
// does). `input` is a string (one user message) or items: messages (role user / system /
// developer / assistant; content a string or input_text / output_text parts), function_call
// (an assistant tool call; consecutive calls join one assistant turn), function_call_output (a
// tool message), reasoning (its summary or content text becomes the next assistant turn's
// reasoning). Function tools {type: "function", name, description, parameters}; tool_choice
// "auto" / "none" / "required" / {type: "function", name} (forced calls enforced by constrained
// decoding), parallel_tool_calls; text.format json_object / json_schema (structured output);
// tools of other types (built-in, namespaces) are left out of the prompt, since clients send
// them always.
// reasoning.effort "none" turns the template's thinking off; otherwise the template's default
// (on). Past turns keep their reasoning (preserve_thinking), so a follow-up's prompt extends the
// previous one and the state cache serves it. Refused: images, files, item references.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "orchid/server/openai_request.h"

namespace orchid::server {

struct ResponsesRequest {
  ChatRequest chat;                   // messages: the input items alone (no instructions)
  std::optional<std::string> instructions;
  std::string previous_response_id;  // "" for none
  bool store = true;
  nlohmann::ordered_json echo;  // the request fields the response object repeats
};

ApiExpected<ResponsesRequest> parse_responses_request(std::string_view body);

}  // namespace orchid::server

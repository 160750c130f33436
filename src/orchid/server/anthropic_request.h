// Anthropic Messages API bodies (POST /v1/messages, /v1/messages/count_tokens) → the same
// validated ChatRequest the OpenAI chat endpoint makes, so both run one template, one parser and
// one engine path. Pure functions of the body bytes, like openai_request.h.
//
// Mapping. `system` (a string or text blocks) becomes the first message. A user turn's
// tool_result blocks become "tool" messages (in order, before its text); an assistant turn's
// thinking blocks its reasoning_content, its tool_use blocks its tool_calls (input as the
// arguments object). Tools {name, description, input_schema} become function tools. `thinking`
// {"type": "enabled" | "adaptive"} turns the template's thinking on; absent or "disabled" leaves
// it off, as Anthropic's API does; past turns keep their thinking blocks (the template's
// preserve_thinking), so each turn's prompt extends the last one's. tool_choice "auto", "none",
// "any" and "tool" (a forced call, of the named tool; constrained decoding enforces it) with
// disable_parallel_tool_use. Images, documents and server tools are refused: orchid serves text
// and client tools.
#pragma once

#include <string_view>

#include "orchid/server/openai_request.h"

namespace orchid::server {

// count_tokens: the counting endpoint's body (max_tokens is not required, sampling ignored).
ApiExpected<ChatRequest> parse_messages_request(std::string_view body, bool count_tokens = false);

}  // namespace orchid::server

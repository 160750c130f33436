// OpenAI request bodies → validated internal requests, or the 400 that names the bad field.
// Pure functions of the body bytes: no model, no tokenizer (range checks that need the
// vocabulary or the context length happen in the server).
//
// Validation is strict on what orchid would otherwise misread (wrong types, out-of-range
// values, best_of > 1, features it does not implement such as image parts) and lenient on the
// rest: unknown fields and fields without effect here (user, metadata, store, service_tier,
// ...) are ignored, as vLLM does. response_format and a forced tool_choice become an
// OutputConstraint; a schema the grammar compiler cannot enforce is refused by the server.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "orchid/server/api_error.h"
#include "orchid/server/output_constraint.h"
#include "orchid/tokenizer/chat_template.h"

namespace orchid::server {

// Sampling and stopping as the client asked; unset fields take the model's
// generation_config.json defaults (see Server::make_generate_request).
struct SamplingOptions {
  std::optional<int> max_tokens;  // max_completion_tokens wins over max_tokens
  std::optional<float> temperature, top_p, min_p;
  std::optional<int> top_k;  // -1 and 0: off
  std::optional<float> presence_penalty, frequency_penalty, repetition_penalty;
  std::optional<uint64_t> seed;
  std::vector<std::string> stop;  // non-empty strings
  int top_logprobs = -1;          // -1: no logprobs; n >= 0: the chosen token + n alternatives
  int n = 1;                      // choices to generate (OpenAI n), each with its own seed
  std::vector<std::pair<int32_t, float>> logit_bias;  // token id → bias in [-100, 100]
};

struct ChatRequest {
  std::string model;                     // as sent (orchid serves one model whatever it says)
  nlohmann::ordered_json messages;       // validated; "reasoning" copied to reasoning_content
  nlohmann::ordered_json tools;          // the OpenAI tool list; [] when none or tool_choice none
  bool parse_tool_calls = false;         // tools given and tool_choice is not "none"
  OutputConstraint output;               // structured output or a forced tool call
  bool parallel_tool_calls = true;       // false: the answer ends after its first tool call
  ChatTemplateOptions template_options;  // thinking switches and template kwargs
  SamplingOptions sampling;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
};

struct CompletionRequest {
  std::string model;
  std::string prompt;                              // the text, when given as text
  std::optional<std::vector<int32_t>> prompt_ids;  // the ids, when given as token ids
  SamplingOptions sampling;
  bool stream = false;
  bool include_usage = false;
};

// POST /apply-template, and /tokenize given messages.
struct TemplateRequest {
  nlohmann::ordered_json messages;
  nlohmann::ordered_json tools;
  ChatTemplateOptions options;  // add_generation_prompt defaults to true
};

// POST /tokenize: {"prompt"|"text": string} or {"messages": [...], ...}.
struct TokenizeRequest {
  std::optional<std::string> text;
  TemplateRequest chat;  // when text is unset
};

// The body as a JSON object; malformed JSON, invalid UTF-8, lone surrogate escapes and
// non-object bodies are 400s.
ApiExpected<nlohmann::ordered_json> parse_json_object(std::string_view body);

ApiExpected<ChatRequest> parse_chat_request(std::string_view body);
ApiExpected<CompletionRequest> parse_completion_request(std::string_view body);
ApiExpected<TokenizeRequest> parse_tokenize_request(std::string_view body);
ApiExpected<TemplateRequest> parse_template_request(std::string_view body);
// POST /detokenize {"tokens": [ids]}: the ids (non-negative 32-bit integers).
ApiExpected<std::vector<int32_t>> parse_detokenize_request(std::string_view body);

}  // namespace orchid::server

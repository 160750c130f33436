// One fuzz input for the request path, shared by the libFuzzer target (fuzz_request.cpp) and
// the bounded random driver among the tests (tests/server/test_request_random.cpp): the first
// byte picks the endpoint ('0' chat completions, '1' completions, '2' tokenize, '3'
// apply-template, '4' detokenize, '5' Anthropic messages; other bytes wrap), the rest is its
// body, parsed and validated
// as the server does; a chat or template request that passes is rendered by the built-in
// Qwen3.6 template, and its output constraint (response_format, a forced tool call) compiled to
// a grammar whose automaton then reads the body's own bytes. Whatever the bytes, that ends in
// a value or a 400 with a message: never a crash, an escaped exception or a stack overflow.
#pragma once

#include <string_view>

#include "orchid/grammar/matcher.h"
#include "orchid/server/anthropic_request.h"
#include "orchid/server/openai_request.h"
#include "orchid/tokenizer/chat_template.h"

namespace orchid::fuzz {

enum class Endpoint { chat, completion, tokenize, apply_template, detokenize, messages };
inline constexpr int kEndpoints = 6;

// What became of one input: refused (400 + message), accepted (and rendered, where a template
// runs), the template refused it (with a message), or a broken contract: a refusal that is not
// a 400 with a message, or a template error without one.
enum class Outcome { refused, accepted, template_error, broken };

inline Outcome exercise_request(std::string_view input) {
  if (input.empty()) return Outcome::refused;
  const auto endpoint = Endpoint((unsigned char)(input[0] - '0') % kEndpoints);
  const std::string_view body = input.substr(1);
  static const ChatTemplate tpl = ChatTemplate::builtin();
  auto refused = [](const server::ApiError& e) {
    return e.status == 400 && !e.message.empty() ? Outcome::refused : Outcome::broken;
  };
  auto render = [&](const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                    const ChatTemplateOptions& options) {
    auto prompt = tpl.render(messages, tools, options);
    if (prompt) return Outcome::accepted;
    return prompt.message().empty() ? Outcome::broken : Outcome::template_error;
  };
  // A request's output constraint: compiled (or refused with a message), then run over bytes.
  auto constrain = [&](const server::ChatRequest& r) {
    if (r.output.kind == server::OutputConstraint::Kind::none) return Outcome::accepted;
    auto g = server::output_grammar(r.output, r.tools, r.parallel_tool_calls);
    if (!g) return g.message().empty() ? Outcome::broken : Outcome::refused;
    grammar::Matcher m(std::make_shared<const grammar::Grammar>(std::move(*g)));
    int32_t s = m.start();
    for (char c : body) {
      if (s == grammar::Matcher::kDead) break;
      (void)m.distance(s);
      s = m.advance(s, uint8_t(c));
    }
    return Outcome::accepted;
  };
  switch (endpoint) {
    case Endpoint::chat: {
      auto r = server::parse_chat_request(body);
      if (!r) return refused(r.error());
      const Outcome o = render(r->messages, r->tools, r->template_options);
      return o == Outcome::accepted ? constrain(*r) : o;
    }
    case Endpoint::completion: {
      auto r = server::parse_completion_request(body);
      return r ? Outcome::accepted : refused(r.error());
    }
    case Endpoint::tokenize: {
      auto r = server::parse_tokenize_request(body);
      if (!r) return refused(r.error());
      return r->text ? Outcome::accepted : render(r->chat.messages, r->chat.tools, r->chat.options);
    }
    case Endpoint::apply_template: {
      auto r = server::parse_template_request(body);
      return r ? render(r->messages, r->tools, r->options) : refused(r.error());
    }
    case Endpoint::detokenize: {
      auto r = server::parse_detokenize_request(body);
      return r ? Outcome::accepted : refused(r.error());
    }
    case Endpoint::messages: {
      auto r = server::parse_messages_request(body);
      if (!r) return refused(r.error());
      const Outcome o = render(r->messages, r->tools, r->template_options);
      return o == Outcome::accepted ? constrain(*r) : o;
    }
  }
  return Outcome::broken;
}

}  // namespace orchid::fuzz

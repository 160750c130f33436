// Parsing of the structured-output and tool_choice fields (output_constraint.h).
#include "orchid/server/output_constraint.h"

#include "orchid/grammar/json_schema.h"
#include "orchid/grammar/tool_call_grammar.h"

namespace orchid::server {
namespace {

// The schema of a json_schema format: an object (or a boolean), default any JSON value.
ApiExpected<OutputConstraint> json_schema_format(const OJson& holder, const std::string& p) {
  OutputConstraint c;
  c.kind = OutputConstraint::Kind::json_schema;
  c.param = p + ".schema";
  const OJson* name = field(holder, "name");
  if (name && !name->is_string()) return wrong_type(p + ".name", "a string", *name);
  if (const OJson* strict = field(holder, "strict"); strict && !strict->is_boolean())
    return wrong_type(p + ".strict", "a boolean", *strict);
  const OJson* schema = field(holder, "schema");
  if (schema && !schema->is_object() && !schema->is_boolean())
    return wrong_type(p + ".schema", "an object", *schema);
  c.schema = schema ? *schema : OJson(true);
  return c;
}

ApiExpected<OutputConstraint> format_of(const OJson& f, const std::string& p, bool nested) {
  if (!f.is_object()) return wrong_type(p, "an object", f);
  const OJson* type = field(f, "type");
  if (!type || !type->is_string()) return need_string(p + ".type");
  OutputConstraint c;
  c.param = p;
  if (*type == "text") return c;
  if (*type == "json_object") {
    c.kind = OutputConstraint::Kind::json_object;
    return c;
  }
  if (*type == "json_schema") {
    if (!nested) return json_schema_format(f, p);
    const OJson* js = field(f, "json_schema");
    if (!js) return bad_request("'" + p + ".json_schema' is required", p + ".json_schema");
    if (!js->is_object()) return wrong_type(p + ".json_schema", "an object", *js);
    return json_schema_format(*js, p + ".json_schema");
  }
  return bad_request("'" + p + ".type' must be \"text\", \"json_object\" or \"json_schema\"",
                     p + ".type");
}

}  // namespace

ApiExpected<OutputConstraint> parse_response_format(const OJson& rf) {
  return format_of(rf, "response_format", /*nested=*/true);
}

ApiExpected<OutputConstraint> parse_text_format(const OJson& format) {
  return format_of(format, "text.format", /*nested=*/false);
}

Err parse_tool_choice(const OJson& tc, bool responses_shape, std::string& choice,
                      OutputConstraint& out) {
  if (tc.is_string()) {
    choice = tc.get<std::string>();
    if (choice != "none" && choice != "auto" && choice != "required")
      return bad_request("'tool_choice' must be \"none\", \"auto\", \"required\" or a function",
                         "tool_choice");
    if (choice == "required") {
      out = OutputConstraint{OutputConstraint::Kind::tool_call, {}, "", "tool_choice"};
    }
    return {};
  }
  if (!tc.is_object()) return wrong_type("tool_choice", "a string or an object", tc);
  const OJson* type = field(tc, "type");
  if (!type || *type != "function")
    return bad_request("'tool_choice.type' must be \"function\"", "tool_choice.type");
  const OJson* name = nullptr;
  std::string p = "tool_choice.name";
  if (responses_shape) {
    name = field(tc, "name");
  } else {
    const OJson* fn = field(tc, "function");
    if (!fn || !fn->is_object())
      return bad_request("'tool_choice.function' must be an object", "tool_choice.function");
    name = field(*fn, "name");
    p = "tool_choice.function.name";
  }
  if (!name || !name->is_string() || name->get<std::string>().empty())
    return bad_request("'" + p + "' must be a non-empty string", p);
  choice = "required";
  out = OutputConstraint{OutputConstraint::Kind::tool_call, {}, name->get<std::string>(), p};
  return {};
}

Err check_forced_call(const OutputConstraint& c, const OJson& tools) {
  if (c.kind != OutputConstraint::Kind::tool_call) return {};
  if (tools.empty())
    return bad_request("'tool_choice' asks for a tool call, but no tools were given", c.param);
  if (c.function.empty()) return {};
  for (const OJson& t : tools)
    if (t.contains("function") && t["function"].value("name", "") == c.function) return {};
  return bad_request("'" + c.param + "': no tool named '" + c.function + "'", c.param);
}

Expected<grammar::Grammar> output_grammar(const OutputConstraint& c, const OJson& tools,
                                          bool parallel) {
  switch (c.kind) {
    case OutputConstraint::Kind::json_object:
      return grammar::json_object_grammar();
    case OutputConstraint::Kind::json_schema:
      return grammar::json_schema_grammar(c.schema);
    case OutputConstraint::Kind::tool_call:
      return grammar::tool_call_grammar(tools, c.function, parallel);
    case OutputConstraint::Kind::none:
      break;
  }
  return err("no output constraint");
}

}  // namespace orchid::server

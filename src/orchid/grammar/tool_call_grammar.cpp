// tool_call_grammar: one alternative per function; parameters compiled like object properties.
#include "orchid/grammar/tool_call_grammar.h"

#include <set>

#include "orchid/grammar/json_schema.h"

namespace orchid::grammar {
namespace {

using json = nlohmann::ordered_json;

// Whether a value of this schema may be a plain string (then the parser keeps the raw text).
bool admits_string(const json& s) {
  if (!s.is_object() || !s.contains("type")) return true;
  const json& t = s["type"];
  if (t.is_string()) return t == "string";
  if (t.is_array())
    for (const json& x : t)
      if (x == "string") return true;
  return false;
}

}  // namespace

Expected<Grammar> tool_call_grammar(const json& tools, const std::string& only, bool parallel) {
  GrammarBuilder b;
  const ByteSet all = ByteSet::any();
  // Text that cannot close its block: no "</", no "<<".
  const Sym text = b.star(b.alt({b.bytes(all - ByteSet::of('<')),
                                 b.seq({b.lit("<"), b.bytes(all - ByteSet::chars("/<"))})}));
  std::vector<Sym> calls;
  for (const json& t : tools) {
    if (!t.is_object() || !t.contains("function") || !t["function"].is_object()) continue;
    const json& fn = t["function"];
    const std::string name = fn.value("name", "");
    if (name.empty() || (!only.empty() && name != only)) continue;
    const json params = fn.value("parameters", json::object());
    const json props = params.is_object() ? params.value("properties", json::object()) : json::object();
    std::set<std::string> required;
    if (params.is_object() && params.contains("required") && params["required"].is_array())
      for (const json& r : params["required"])
        if (r.is_string()) required.insert(r.get<std::string>());
    // Parameter names beside the declared ones: only where additionalProperties allows them
    // (json_schema.h: not for "properties": {}, a tool without arguments — free names there let
    // a sampled model write thousands of tokens of made-up ones into a call that should be empty).
    const json add = params.is_object() ? additional_properties(params) : json(true);
    const bool free_names = !(add.is_boolean() && !add.get<bool>());
    Sym body;
    if (!props.is_object() || props.empty()) {
      const Sym pname = b.repeat(b.bytes(all - ByteSet::chars("<>\n")), 1, 128);
      body = free_names ? b.star(b.seq({b.lit("<parameter="), pname, b.lit(">\n"), text,
                                         b.lit("\n</parameter>\n")}))
                        : b.empty();
    } else {
      JsonSchemaCompiler c(b, params);
      std::vector<Sym> parts;
      for (const auto& [pname, schema] : props.items()) {
        Sym value;
        if (admits_string(schema)) {
          // Raw text; an enum of strings is its members' raw text.
          value = text;
          if (schema.is_object() && schema.contains("enum") && schema["enum"].is_array()) {
            std::vector<Sym> opts;
            for (const json& v : schema["enum"])
              if (v.is_string()) opts.push_back(b.lit(v.get<std::string>()));
            if (!opts.empty()) value = b.alt(opts);
          }
        } else {
          auto v = c.value(schema);
          if (!v) return err("tool ", name, ", parameter ", pname, ": ", v.message());
          value = *v;
        }
        const Sym param = b.seq({b.lit("<parameter=" + pname + ">\n"), value, b.lit("\n</parameter>\n")});
        parts.push_back(required.count(pname) ? param : b.opt(param));
      }
      body = b.seq(parts);
    }
    calls.push_back(b.seq({b.lit("<tool_call>\n<function=" + name + ">\n"), body,
                           b.lit("</function>\n</tool_call>")}));
  }
  if (calls.empty())
    return only.empty() ? err("no function tool to call") : err("no function named ", only, " among the tools");
  const Sym call = b.alt(calls);
  const Sym lead = b.repeat(b.bytes(ByteSet::chars(" \n")), 0, 4);
  const Sym more = parallel ? b.star(b.seq({b.lit("\n"), call})) : b.empty();
  return b.finish(b.seq({lead, call, more}));
}

}  // namespace orchid::grammar

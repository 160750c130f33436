// JsonSchemaCompiler: one rule per schema node; the shared JSON lexical rules made once.
#include "orchid/grammar/json_schema.h"

#include <cmath>
#include <set>
#include <stdexcept>

namespace orchid::grammar {
namespace {

using json = nlohmann::ordered_json;

constexpr int kMaxSchemaDepth = 64;
constexpr int kMaxWs = 20;
constexpr int kMaxIntDigits = 16;
constexpr int64_t kMaxEnumeratedInts = 1000;
constexpr int kMaxBoundedCount = 10000;      // minLength / maxLength / minItems / maxItems
constexpr size_t kMaxGrammarElements = 2000000;

// Thrown inside the compiler, turned into an Error at its entry points.
struct SchemaError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

const std::set<std::string>& annotations() {
  static const std::set<std::string> k = {
      "title",    "description", "default",   "examples", "$schema", "$id",
      "$comment", "deprecated",  "readOnly",  "writeOnly", "strict", "$defs",
      "definitions"};
  return k;
}
const std::set<std::string>& supported() {
  static const std::set<std::string> k = {
      "type",      "properties", "required",  "additionalProperties", "items",
      "minItems",  "maxItems",   "enum",      "const",                "anyOf",
      "oneOf",     "allOf",      "$ref",      "nullable",             "minLength",
      "maxLength", "format",     "minimum",   "maximum",              "exclusiveMinimum",
      "exclusiveMaximum"};
  return k;
}

int count_of(const json& s, const char* key, int fallback) {
  if (!s.contains(key)) return fallback;
  const json& v = s[key];
  if (!v.is_number_integer() || v.get<int64_t>() < 0)
    throw SchemaError(std::string(key) + " must be a non-negative integer");
  if (v.get<int64_t>() > kMaxBoundedCount)
    throw SchemaError(std::string(key) + " above " + std::to_string(kMaxBoundedCount) +
                      " is not supported");
  return int(v.get<int64_t>());
}

}  // namespace

JsonSchemaCompiler::JsonSchemaCompiler(GrammarBuilder& b, const json& root) : b_(b), root_(root) {}

Expected<Sym> JsonSchemaCompiler::value(const json& schema) {
  try {
    return compile(schema, 0);
  } catch (const SchemaError& e) {
    return err("json schema: ", e.what());
  }
}

Sym JsonSchemaCompiler::ws() {
  if (!have_ws_) ws_ = b_.repeat(b_.bytes(ByteSet::chars(" \t\r\n")), 0, kMaxWs), have_ws_ = true;
  return ws_;
}

Sym JsonSchemaCompiler::string_char() {
  if (have_char_) return char_;
  const Sym cont = b_.bytes(ByteSet::range(0x80, 0xbf));
  const Sym hex = b_.bytes(ByteSet::range('0', '9') | ByteSet::range('a', 'f') |
                           ByteSet::range('A', 'F'));
  // \uXXXX, never a surrogate (D800-DFFF): a lone one is not valid Unicode text.
  const Sym u_escape = b_.alt({
      b_.seq({b_.bytes(ByteSet::range('0', '9') | ByteSet::range('a', 'c') |
                       ByteSet::range('A', 'C') | ByteSet::chars("eEfF")),
              hex, hex, hex}),
      b_.seq({b_.bytes(ByteSet::chars("dD")), b_.bytes(ByteSet::range('0', '7')), hex, hex}),
  });
  const Sym escape = b_.seq(
      {b_.lit("\\"), b_.alt({b_.bytes(ByteSet::chars("\"\\/bfnrt")), b_.seq({b_.lit("u"), u_escape})})});
  // Well-formed UTF-8 (no overlong forms, no surrogates, at most U+10FFFF).
  const Sym utf8 = b_.alt({
      b_.seq({b_.bytes(ByteSet::range(0xc2, 0xdf)), cont}),
      b_.seq({b_.bytes(ByteSet::of(0xe0)), b_.bytes(ByteSet::range(0xa0, 0xbf)), cont}),
      b_.seq({b_.bytes(ByteSet::range(0xe1, 0xec) | ByteSet::range(0xee, 0xef)), cont, cont}),
      b_.seq({b_.bytes(ByteSet::of(0xed)), b_.bytes(ByteSet::range(0x80, 0x9f)), cont}),
      b_.seq({b_.bytes(ByteSet::of(0xf0)), b_.bytes(ByteSet::range(0x90, 0xbf)), cont, cont}),
      b_.seq({b_.bytes(ByteSet::range(0xf1, 0xf3)), cont, cont, cont}),
      b_.seq({b_.bytes(ByteSet::of(0xf4)), b_.bytes(ByteSet::range(0x80, 0x8f)), cont, cont}),
  });
  const Sym plain = b_.bytes(ByteSet::range(0x20, 0x7f) - ByteSet::chars("\"\\"));
  char_ = b_.alt({plain, escape, utf8});
  have_char_ = true;
  return char_;
}

Sym JsonSchemaCompiler::digits(int min, int max) {
  return b_.repeat(b_.bytes(ByteSet::range('0', '9')), min, max);
}

Sym JsonSchemaCompiler::any_value() {
  if (have_any_) return any_value_;
  have_any_ = true;
  // value ::= object | array | string | number | true | false | null, recursively.
  const uint32_t value = b_.declare();
  any_value_ = GrammarBuilder::rule(value);
  const Sym w = ws();
  const Sym str = string(json::object());
  const Sym member = b_.seq({str, w, b_.lit(":"), w, any_value_});
  const Sym obj = b_.seq({b_.lit("{"), w,
                          b_.opt(b_.seq({member, b_.star(b_.seq({w, b_.lit(","), w, member})), w})),
                          b_.lit("}")});
  const Sym arr = b_.seq({b_.lit("["), w,
                          b_.opt(b_.seq({any_value_, b_.star(b_.seq({w, b_.lit(","), w, any_value_})), w})),
                          b_.lit("]")});
  any_object_ = obj;
  b_.define(value, {{obj}, {arr}, {str}, {number(json::object())}, {b_.lit("true")},
                    {b_.lit("false")}, {b_.lit("null")}});
  return any_value_;
}

Sym JsonSchemaCompiler::any_object() {
  any_value();
  return any_object_;
}

Sym JsonSchemaCompiler::literal_json(const json& v) {
  return b_.lit(v.dump());
}

Sym JsonSchemaCompiler::compile(const json& s, int depth) {
  if (depth > kMaxSchemaDepth)
    throw SchemaError("nested deeper than " + std::to_string(kMaxSchemaDepth) + " levels");
  if (b_.size() > kMaxGrammarElements) throw SchemaError("the schema makes too large a grammar");
  if (s.is_boolean()) {
    if (!s.get<bool>()) throw SchemaError("the schema false admits no value");
    return any_value();
  }
  if (!s.is_object()) throw SchemaError("a schema must be an object or a boolean");
  for (const auto& [k, v] : s.items())
    if (!supported().count(k) && !annotations().count(k))
      throw SchemaError("the keyword \"" + k + "\" is not supported");

  Sym out;
  if (s.contains("$ref")) {
    if (!s["$ref"].is_string()) throw SchemaError("$ref must be a string");
    for (const auto& [k, v] : s.items())
      if (k != "$ref" && !annotations().count(k))
        throw SchemaError("\"" + k + "\" beside $ref is not supported");
    return ref(s["$ref"].get<std::string>(), depth);
  }
  if (s.contains("const")) {
    out = literal_json(s["const"]);
  } else if (s.contains("enum")) {
    if (!s["enum"].is_array() || s["enum"].empty())
      throw SchemaError("enum must be a non-empty array");
    std::vector<Sym> opts;
    for (const json& v : s["enum"]) opts.push_back(literal_json(v));
    out = b_.alt(opts);
  } else if (s.contains("anyOf") || s.contains("oneOf")) {
    const json& list = s.contains("anyOf") ? s["anyOf"] : s["oneOf"];
    if (!list.is_array() || list.empty()) throw SchemaError("anyOf / oneOf must be a non-empty array");
    std::vector<Sym> opts;
    for (const json& sub : list) opts.push_back(compile(sub, depth + 1));
    out = b_.alt(opts);
  } else if (s.contains("allOf")) {
    if (!s["allOf"].is_array() || s["allOf"].size() != 1)
      throw SchemaError("allOf is supported with exactly one schema");
    out = compile(s["allOf"][0], depth + 1);
  } else {
    std::vector<std::string> types;
    if (s.contains("type")) {
      const json& t = s["type"];
      if (t.is_string()) {
        types.push_back(t.get<std::string>());
      } else if (t.is_array() && !t.empty()) {
        for (const json& x : t) {
          if (!x.is_string()) throw SchemaError("type must be a string or an array of strings");
          types.push_back(x.get<std::string>());
        }
      } else {
        throw SchemaError("type must be a string or an array of strings");
      }
    } else if (s.contains("properties") || s.contains("additionalProperties")) {
      types = {"object"};
    } else if (s.contains("items")) {
      types = {"array"};
    } else if (s.contains("minLength") || s.contains("maxLength") || s.contains("format")) {
      types = {"string"};
    }
    if (types.empty()) {
      out = any_value();
    } else {
      std::vector<Sym> opts;
      for (const std::string& t : types) opts.push_back(typed(t, s, depth));
      out = opts.size() == 1 ? opts[0] : b_.alt(opts);
    }
  }
  if (s.contains("nullable") && s["nullable"] == true) out = b_.alt({out, b_.lit("null")});
  return out;
}

Sym JsonSchemaCompiler::typed(const std::string& t, const json& s, int depth) {
  if (t == "object") return object(s, depth);
  if (t == "array") return array(s, depth);
  if (t == "string") return string(s);
  if (t == "integer") return integer(s);
  if (t == "number") return number(s);
  if (t == "boolean") return b_.alt({b_.lit("true"), b_.lit("false")});
  if (t == "null") return b_.lit("null");
  throw SchemaError("unknown type \"" + t + "\"");
}

json additional_properties(const json& s) {
  return s.value("additionalProperties", json(!s.contains("properties")));
}

Sym JsonSchemaCompiler::object(const json& s, int depth) {
  const Sym w = ws();
  const json props = s.value("properties", json::object());
  if (!props.is_object()) throw SchemaError("properties must be an object");
  std::set<std::string> required;
  if (s.contains("required")) {
    if (!s["required"].is_array()) throw SchemaError("required must be an array of names");
    for (const json& r : s["required"]) {
      if (!r.is_string()) throw SchemaError("required must be an array of names");
      if (!props.contains(r.get<std::string>()))
        throw SchemaError("required property \"" + r.get<std::string>() +
                          "\" is not in properties");
      required.insert(r.get<std::string>());
    }
  }
  if (props.empty()) {
    // No named properties: {} unless additionalProperties allows keys, then keys → it.
    const json add = additional_properties(s);
    if (add.is_boolean() && !add.get<bool>()) return b_.seq({b_.lit("{"), w, b_.lit("}")});
    if (add.is_boolean()) return any_object();
    const Sym member = b_.seq({string(json::object()), w, b_.lit(":"), w, compile(add, depth + 1)});
    return b_.seq({b_.lit("{"), w,
                   b_.opt(b_.seq({member, b_.star(b_.seq({w, b_.lit(","), w, member})), w})),
                   b_.lit("}")});
  }
  // Properties in order; optional ones may be skipped. first[i]: properties i.. with none
  // written yet; rest[i]: the same after one was written (each then starts with a comma).
  std::vector<std::pair<Sym, bool>> members;  // (member rule, required)
  for (const auto& [name, sub] : props.items())
    members.push_back({b_.seq({literal_json(json(name)), w, b_.lit(":"), w, compile(sub, depth + 1)}),
                       required.count(name) > 0});
  const size_t n = members.size();
  std::vector<Sym> first(n + 1), rest(n + 1);
  first[n] = rest[n] = b_.empty();
  for (size_t i = n; i-- > 0;) {
    const auto [m, req] = members[i];
    const Sym with_rest = b_.seq({m, w, rest[i + 1]});
    const Sym comma_rest = b_.seq({b_.lit(","), w, m, w, rest[i + 1]});
    first[i] = req ? with_rest : b_.alt({with_rest, first[i + 1]});
    rest[i] = req ? comma_rest : b_.alt({comma_rest, rest[i + 1]});
  }
  return b_.seq({b_.lit("{"), w, first[0], b_.lit("}")});
}

Sym JsonSchemaCompiler::array(const json& s, int depth) {
  if (s.contains("prefixItems")) throw SchemaError("prefixItems is not supported");
  const Sym w = ws();
  const Sym item = s.contains("items") ? compile(s["items"], depth + 1) : any_value();
  const int lo = count_of(s, "minItems", 0), hi = count_of(s, "maxItems", -1);
  if (hi >= 0 && hi < lo) throw SchemaError("maxItems is below minItems");
  if (hi == 0) return b_.seq({b_.lit("["), w, b_.lit("]")});
  const Sym more = b_.repeat(b_.seq({w, b_.lit(","), w, item}), lo > 0 ? lo - 1 : 0,
                             hi < 0 ? -1 : hi - 1);
  const Sym items = b_.seq({item, more, w});
  return b_.seq({b_.lit("["), w, lo > 0 ? items : b_.opt(items), b_.lit("]")});
}

Sym JsonSchemaCompiler::string(const json& s) {
  if (s.contains("format")) {
    if (!s["format"].is_string()) throw SchemaError("format must be a string");
    if (s.contains("minLength") || s.contains("maxLength"))
      throw SchemaError("format with minLength / maxLength is not supported");
    return b_.seq({b_.lit("\""), format(s["format"].get<std::string>()), b_.lit("\"")});
  }
  const bool bounded = s.contains("minLength") || s.contains("maxLength");
  if (!bounded && have_string_) return string_;
  const int lo = count_of(s, "minLength", 0), hi = count_of(s, "maxLength", -1);
  if (hi >= 0 && hi < lo) throw SchemaError("maxLength is below minLength");
  const Sym body = b_.repeat(string_char(), lo, hi);
  const Sym out = b_.seq({b_.lit("\""), body, b_.lit("\"")});
  if (!bounded) string_ = out, have_string_ = true;
  return out;
}

Sym JsonSchemaCompiler::format(const std::string& f) {
  const auto d = [&](char lo, char hi) { return b_.bytes(ByteSet::range(uint8_t(lo), uint8_t(hi))); };
  const auto hexes = [&](int n) {
    return b_.repeat(b_.bytes(ByteSet::range('0', '9') | ByteSet::range('a', 'f')), n, n);
  };
  // Days that every year has in each month (so no Feb 29: a grammar cannot see leap years).
  const auto date = [&] {
    const Sym month31 = b_.alt({b_.lit("01"), b_.lit("03"), b_.lit("05"), b_.lit("07"),
                                b_.lit("08"), b_.lit("10"), b_.lit("12")});
    const Sym month30 = b_.alt({b_.lit("04"), b_.lit("06"), b_.lit("09"), b_.lit("11")});
    const Sym day28 = b_.alt({b_.seq({b_.lit("0"), d('1', '9')}), b_.seq({b_.lit("1"), d('0', '9')}),
                              b_.seq({b_.lit("2"), d('0', '8')})});
    const Sym day30 = b_.alt({day28, b_.lit("29"), b_.lit("30")});
    const Sym day31 = b_.alt({day30, b_.lit("31")});
    const Sym md = b_.alt({b_.seq({month31, b_.lit("-"), day31}), b_.seq({month30, b_.lit("-"), day30}),
                           b_.seq({b_.lit("02-"), day28})});
    return b_.seq({digits(4, 4), b_.lit("-"), md});
  };
  const auto time = [&] {
    const Sym hour = b_.alt({b_.seq({d('0', '1'), d('0', '9')}), b_.seq({b_.lit("2"), d('0', '3')})});
    const Sym minute = b_.seq({d('0', '5'), d('0', '9')});
    const Sym frac = b_.opt(b_.seq({b_.lit("."), digits(1, 6)}));
    const Sym zone = b_.alt({b_.lit("Z"), b_.seq({b_.bytes(ByteSet::chars("+-")), hour, b_.lit(":"), minute})});
    return b_.seq({hour, b_.lit(":"), minute, b_.lit(":"), minute, frac, zone});
  };
  if (f == "date") return date();
  if (f == "time") return time();
  if (f == "date-time") return b_.seq({date(), b_.lit("T"), time()});
  if (f == "uuid")
    return b_.seq({hexes(8), b_.lit("-"), hexes(4), b_.lit("-"), hexes(4), b_.lit("-"), hexes(4),
                   b_.lit("-"), hexes(12)});
  throw SchemaError("format \"" + f + "\" is not supported (date, time, date-time, uuid are)");
}

Sym JsonSchemaCompiler::integer(const json& s) {
  const auto bound = [&](const char* key) -> std::optional<int64_t> {
    if (!s.contains(key)) return std::nullopt;
    const json& v = s[key];
    if (!v.is_number()) throw SchemaError(std::string(key) + " must be a number");
    const double x = v.get<double>();
    if (!std::isfinite(x) || std::fabs(x) > 1e15)
      throw SchemaError(std::string(key) + " is out of the supported range");
    return int64_t(std::string(key).starts_with("exclusiveMin") ? std::floor(x) + 1
                   : std::string(key).starts_with("exclusiveMax") ? std::ceil(x) - 1
                   : std::string(key) == "minimum"                 ? std::ceil(x)
                                                                  : std::floor(x));
  };
  std::optional<int64_t> lo = bound("minimum"), hi = bound("maximum");
  if (auto e = bound("exclusiveMinimum")) lo = lo ? std::max(*lo, *e) : *e;
  if (auto e = bound("exclusiveMaximum")) hi = hi ? std::min(*hi, *e) : *e;
  const Sym nonzero = b_.bytes(ByteSet::range('1', '9'));
  const Sym positive = b_.seq({nonzero, digits(0, kMaxIntDigits - 1)});
  if (!lo && !hi) return b_.seq({b_.opt(b_.lit("-")), b_.alt({b_.lit("0"), positive})});
  if (lo && hi) {
    if (*hi < *lo) throw SchemaError("the integer bounds admit no value");
    if (*hi - *lo >= kMaxEnumeratedInts)
      throw SchemaError("integer ranges of more than 1000 values are not supported");
    std::vector<Sym> opts;
    for (int64_t v = *lo; v <= *hi; ++v) opts.push_back(b_.lit(std::to_string(v)));
    return b_.alt(opts);
  }
  if (lo && !hi && *lo == 0) return b_.alt({b_.lit("0"), positive});
  if (lo && !hi && *lo == 1) return positive;
  throw SchemaError("integer bounds are supported as a range of at most 1000 values or a minimum of 0 or 1");
}

Sym JsonSchemaCompiler::number(const json& s) {
  for (const char* k : {"maximum", "exclusiveMinimum", "exclusiveMaximum"})
    if (s.contains(k)) throw SchemaError(std::string("number ") + k + " is not supported");
  const bool nonneg = s.contains("minimum");
  if (nonneg && !(s["minimum"].is_number() && s["minimum"].get<double>() == 0.0))
    throw SchemaError("number minimum is supported only as 0");
  if (!nonneg && have_number_) return number_;
  const Sym integral = b_.alt({b_.lit("0"), b_.seq({b_.bytes(ByteSet::range('1', '9')),
                                                    digits(0, kMaxIntDigits - 1)})});
  const Sym frac = b_.opt(b_.seq({b_.lit("."), digits(1, 16)}));
  const Sym exp = b_.opt(b_.seq({b_.bytes(ByteSet::chars("eE")), b_.opt(b_.bytes(ByteSet::chars("+-"))),
                                 digits(1, 2)}));
  if (nonneg) return b_.seq({integral, frac, exp});
  number_ = b_.seq({b_.opt(b_.lit("-")), integral, frac, exp});
  have_number_ = true;
  return number_;
}

Sym JsonSchemaCompiler::ref(const std::string& pointer, int depth) {
  if (auto it = refs_.find(pointer); it != refs_.end()) return GrammarBuilder::rule(it->second);
  if (pointer != "#" && !pointer.starts_with("#/"))
    throw SchemaError("$ref \"" + pointer + "\": only references inside the schema (\"#/…\") are supported");
  const json* target = &root_;
  if (pointer != "#") {
    try {
      target = &root_.at(json::json_pointer(pointer.substr(1)));
    } catch (const std::exception&) {
      throw SchemaError("$ref \"" + pointer + "\" points at nothing");
    }
  }
  const uint32_t id = b_.declare();  // before compiling: the target may refer to itself
  refs_[pointer] = id;
  b_.define(id, {{compile(*target, depth + 1)}});
  return GrammarBuilder::rule(id);
}

Expected<Grammar> json_schema_grammar(const json& schema) {
  GrammarBuilder b;
  JsonSchemaCompiler c(b, schema);
  auto v = c.value(schema);
  if (!v) return v.error();
  const Sym w = c.ws();
  return b.finish(b.seq({w, *v, w}));
}

Grammar json_object_grammar() {
  GrammarBuilder b;
  JsonSchemaCompiler c(b, json::object());
  const Sym w = c.ws();
  return b.finish(b.seq({w, c.any_object(), w}));
}

}  // namespace orchid::grammar

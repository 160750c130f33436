// JSON schema → grammar: the rules of a JSON text that validates against the schema, for
// structured output (response_format json_schema, text.format, typed tool arguments).
//
// What a schema may say (anything else is an error naming the keyword, never ignored, so a
// constrained answer always validates): type (one or a list), properties / required (the
// properties come out in the schema's order; optional ones may be left out; no others are
// written, which every additionalProperties admits; "properties": {} alone is {}, the call of a
// tool without arguments), additionalProperties as a schema for an object without properties, items, minItems / maxItems, enum, const, anyOf, oneOf (as anyOf),
// allOf of one schema, $ref into "#", "#/$defs/…" or "#/definitions/…" (recursion allowed),
// nullable (OpenAPI), minLength / maxLength, format date | time | date-time | uuid, integer
// bounds (a range of at most 1000 values, or a minimum of 0 or 1 alone), number minimum 0.
// Annotations (title, description, default, examples, $schema, $id, $comment, deprecated,
// readOnly, writeOnly, strict) are ignored. Schemas nest at most 64 levels.
//
// What is written, so that sampling always ends: whitespace only between tokens, at most 20
// bytes in a row; integers of at most 16 digits; fractions and exponents of at most 16 and 2
// (so every number fits a double).
// Strings are valid UTF-8 (escapes \uXXXX never lone surrogates).
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "orchid/grammar/grammar.h"
#include "orchid/util/status.h"

namespace orchid::grammar {

class JsonSchemaCompiler {
 public:
  // root: the document $ref "#…" points into (the schema itself, or a tool's parameters).
  JsonSchemaCompiler(GrammarBuilder& b, const nlohmann::ordered_json& root);

  // The rule of a JSON value valid against `schema` (no surrounding whitespace).
  Expected<Sym> value(const nlohmann::ordered_json& schema);
  // Any JSON object / any JSON value.
  Sym any_object();
  Sym any_value();
  Sym ws();  // whitespace between tokens: at most 20 bytes of space, tab, CR, LF

 private:
  Sym compile(const nlohmann::ordered_json& schema, int depth);
  Sym typed(const std::string& type, const nlohmann::ordered_json& schema, int depth);
  Sym object(const nlohmann::ordered_json& schema, int depth);
  Sym array(const nlohmann::ordered_json& schema, int depth);
  Sym string(const nlohmann::ordered_json& schema);
  Sym integer(const nlohmann::ordered_json& schema);
  Sym number(const nlohmann::ordered_json& schema);
  Sym ref(const std::string& pointer, int depth);
  Sym literal_json(const nlohmann::ordered_json& v);  // the value's compact JSON text
  Sym string_char();
  Sym digits(int min, int max);
  Sym format(const std::string& f);

  GrammarBuilder& b_;
  const nlohmann::ordered_json& root_;
  std::map<std::string, uint32_t> refs_;  // resolved $ref → its rule
  // Shared rules, made on first use.
  Sym ws_{}, char_{}, string_{}, number_{}, any_value_{}, any_object_{};
  bool have_ws_ = false, have_char_ = false, have_string_ = false, have_number_ = false,
       have_any_ = false;
};

// The whole answer's grammar: optional whitespace, a value valid against `schema`, optional
// whitespace. An unsupported or malformed schema is an error saying what and where.
// What an object schema says of keys beyond its named properties: its additionalProperties
// (false, true or a schema), by default true without a "properties" key and false with one —
// "properties": {} declares an object without keys (a tool without arguments), and the named
// properties of a longer list are the only ones written. The JSON grammar and the tool-call
// grammar both follow this.
nlohmann::ordered_json additional_properties(const nlohmann::ordered_json& object_schema);

Expected<Grammar> json_schema_grammar(const nlohmann::ordered_json& schema);
// The same for any JSON object (response_format json_object).
Grammar json_object_grammar();

}  // namespace orchid::grammar

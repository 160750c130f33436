// The Jinja interpreter on its own: each construct against the output of Python Jinja2 3.1.2
// set up as transformers does (the expected strings below were produced by it), syntax and
// runtime errors with their line, and hostile templates that must fail cleanly, never crash.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "orchid/tokenizer/jinja/template.h"

namespace orchid::jinja {
namespace {

// Variables every case sees.
Json vars() {
  return Json::parse(R"({"d": {"a": 1, "items": 5}, "l": [1, "a", null, true, 1.5], "n": null,
      "s": "héllo", "msgs": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}],
      "x": "X"})");
}

struct Case {
  std::string source;
  std::string expected;  // output, or for errors a piece of the message
};

void expect_renders(const std::vector<Case>& cases) {
  const Json v = vars();
  for (const Case& c : cases) {
    SCOPED_TRACE(c.source);
    auto t = Template::parse(c.source);
    ASSERT_TRUE(t.ok()) << t.message();
    auto out = t->render(v);
    ASSERT_TRUE(out.ok()) << out.message();
    EXPECT_EQ(*out, c.expected);
  }
}

void expect_errors(const std::vector<Case>& cases) {
  const Json v = vars();
  for (const Case& c : cases) {
    SCOPED_TRACE(c.source);
    auto t = Template::parse(c.source);
    std::string message = t.ok() ? "" : t.message();
    if (t.ok()) {
      auto out = t->render(v);
      ASSERT_FALSE(out.ok()) << "rendered: " << *out;
      message = out.message();
    }
    EXPECT_NE(message.find(c.expected), std::string::npos) << message;
  }
}

// trim_blocks, lstrip_blocks, -/+ modifiers, comments, raw, newline handling.
TEST(Jinja, Whitespace) {
  expect_renders({
      {"a\n  {% if true %}\n  b\n  {% endif %}\nc", "a\n  b\nc"},
      {"a  {%- if true -%}  b  {%- endif -%}  c", "abc"},
      {"x\n    {# comment #}\ny", "x\ny"},
      {"x {{- 1 -}} y {{ 2 }}\n z", "x1y 2\n z"},
      {"  {%+ if true %}k{% endif %}", "  k"},
      {"{% if true +%}\nk{% endif %}", "\nk"},
      {"{% for i in [1, 2] %}\n  {{ i }}\n{% endfor %}\n", "  1\n  2\n"},
      {"a\n  {% raw %}\n {{ x }}\n  {% endraw %}\nb", "a\n\n {{ x }}\nb"},
      {"line1\r\nline2\r\n{% if true %}\r\nX\r\n{% endif %}\r\n", "line1\nline2\nX\n"},
      {"kept\n\n", "kept\n"},
      {"{{ 'a' }}   \n   {{ 'b' }}", "a   \n   b"},
      {"　{%- if true %}　x\n{%- endif %}", "　x"},
  });
}

// strings with escapes, numbers, lists, dicts, Python str() of values.
TEST(Jinja, Literals) {
  expect_renders({
      {"{{ 'a\\tb' }}|{{ \"q\\\"\" }}|{{ '\\x41\\u00e9\\U0001F600' }}|{{ '\\101' }}|{{ 'a\\qb' }}",
       "a\tb|q\"|Aé😀|A|a\\qb"},
      {"{{ 1_000 }} {{ 0x1F }} {{ 0b101 }} {{ 0o17 }} {{ 1.5e3 }} {{ 2E-3 }}",
       "1000 31 5 15 1500.0 0.002"},
      {"{{ [1, 'a', none, true, 1.5, {'k': [1]}] }}|{{ {'a': 1, 'b': 'x'} }}|{{ 'a' 'b' }}",
       "[1, 'a', None, True, 1.5, {'k': [1]}]|{'a': 1, 'b': 'x'}|ab"},
      {"{{ True }}{{ False }}{{ None }}|{{ \"it's\" }}|{{ ['it\\'s', 'q\"'] }}",
       "TrueFalseNone|it's|[\"it's\", 'q\"']"},
      {"{{ 0.1 }} {{ 1/3 }} {{ 1e100 }} {{ -0.0 }} {{ 1e16 }} {{ 123456789.0 }} {{ 0.0001 }} {{ "
       "0.00001 }}",
       "0.1 0.3333333333333333 1e+100 -0.0 1e+16 123456789.0 0.0001 1e-05"},
  });
}

// arithmetic, ~, comparisons, in, and/or/not, inline if.
TEST(Jinja, Operators) {
  expect_renders({
      {"{{ 1 + 2 * 3 - 4 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % -3 }} {{ 2 ** 3 ** 2 }} {{ -2 ** "
       "2 }}",
       "5.0 3 -4 -2 64 4"},
      {"{{ 'a' ~ 1 ~ none ~ true ~ u }}", "a1NoneTrue"},
      {"{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 1 == 1.0 }} {{ 1 == true }} {{ [1] == [1] }} {{ {'a': "
       "1, 'b': 2} == {'b': 2, 'a': 1} }}",
       "True False True True True True"},
      {"{{ 'b' in 'abc' }} {{ 'z' not in 'abc' }} {{ 1 in [1, 2] }} {{ 'a' in {'a': 1} }} {{ 'x' "
       "in u }}",
       "True True True True False"},
      {"{{ '' or 'x' }} {{ 0 and 1 }} {{ none or none }} {{ 1 and 'y' }} {{ not u }}",
       "x 0 None y True"},
      {"{{ 'yes' if 1 else 'no' }} {{ 'yes' if 0 else 'no' }} [{{ 'yes' if 0 }}]", "yes no []"},
      {"{{ 'ab' * 3 }} {{ [0] * 2 }} {{ [1] + [2] }} {{ 5.5 // 2 }} {{ -5.5 % 2 }} {{ 2 ** -1 }} "
       "{{ true + 1 }}",
       "ababab [0, 0] [1, 2] 2.0 0.5 0.5 2"},
  });
}

// attribute and item lookup, negative indexes, slices.
TEST(Jinja, Subscripts) {
  expect_renders({
      {"{{ l[0] }} {{ l[-1] }} [{{ l[10] }}] {{ l[1:3] }} {{ l[::-1] }} {{ l[::2] }} {{ s[1:] }} "
       "{{ s[::-1] }} {{ s[-2:] }} {{ s[1] }}",
       "1 1.5 [] ['a', None] [1.5, True, None, 'a', 1] [1, None, 1.5] éllo olléh lo é"},
      {"{{ d.a }} {{ d['a'] }} [{{ d.zz }}] {{ d['items'] }} {{ l.0 }} [{{ n.x }}] [{{ s.x }}]",
       "1 1 [] 5 1 [] []"},
      {"{{ msgs[0].role }} {{ msgs[-1]['content'] }} {{ (msgs|last).role }}", "user yo assistant"},
  });
}

// loop variables, for-else, filtered loops, unpacking, break/continue, nesting.
TEST(Jinja, Loops) {
  expect_renders({
      {"{% for x in l %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ "
       "loop.first }}{{ loop.last }}{{ loop.length }},{% endfor %}",
       "1054TrueFalse5,2143FalseFalse5,3232FalseFalse5,4321FalseFalse5,5410FalseTrue5,"},
      {"{% for x in [1, 2, 3] %}{{ loop.previtem }}-{{ loop.nextitem }};{% endfor %}",
       "-2;1-3;2-;"},
      {"{% for x in [] %}a{% else %}empty{% endfor %}|{% for x in [1, 2, 3, 4] if x is even %}{{ x "
       "}}/{{ loop.length }} {% endfor %}",
       "empty|2/2 4/2 "},
      {"{% for k, v in d|items %}{{ k }}={{ v }};{% endfor %}{% for k in d %}{{ k }};{% endfor "
       "%}{% for c in 'héy' %}[{{ c }}]{% endfor %}",
       "a=1;items=5;a;items;[h][é][y]"},
      {"{% for x in [1, 2, 3] %}{% if x == 2 %}{% continue %}{% endif %}{{ x }}{% endfor %}|{% for "
       "x in [1, 2, 3] %}{% if x == 2 %}{% break %}{% endif %}{{ x }}{% endfor %}",
       "13|1"},
      {"{% for x in [1, 2] %}{% for y in 'ab' %}{{ loop.index }}{{ x }}{{ y }} {% endfor %}{{ "
       "loop.index }}{% endfor %}",
       "11a 21b 112a 22b 2"},
      {"{% for m in msgs[::-1] %}{{ m.role }}{{ loop.cycle('+', '-') }}{% endfor %}",
       "assistant+user-"},
  });
}

// scoping of set (loop-local), namespace(), tuple and block set.
TEST(Jinja, Set) {
  expect_renders({
      {"{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{{ x }}{% endfor %}{{ x }}", "21"},
      {"{% set x = 1 %}{% for i in range(3) %}{{ x }}{% set x = i %}{% endfor %}{{ x }}", "1111"},
      {"{% set ns = namespace(x=1, y=[]) %}{% for i in [1, 2] %}{% set ns.x = ns.x + i %}{% endfor "
       "%}{{ ns.x }} {{ ns.y }} {{ ns }}",
       "4 [] <Namespace {'x': 4, 'y': []}>"},
      {"{% set a, b = [1, 2] %}{{ a }}{{ b }}|{% set c, d = 3, 4 %}{{ c }}{{ d }}", "12|34"},
      {"{% set x %}hello {{ 1 }}{% endset %}[{{ x }}]{% set y | upper %}hi{% endset %}[{{ y }}]",
       "[hello 1][HI]"},
      {"{% if true %}{% set x = 'set in if' %}{% endif %}{{ x }}", "set in if"},
  });
}

// if / elif / else.
TEST(Jinja, If) {
  expect_renders({
      {"{% if 0 %}a{% elif 1 %}b{% else %}c{% endif %}{% if 0 %}a{% elif 0 %}b{% else %}c{% endif "
       "%}{% if '' %}x{% endif %}",
       "bc"},
  });
}

// default and keyword arguments, recursion, closures, output as a string.
TEST(Jinja, Macros) {
  expect_renders({
      {"{% macro m(a, b='d') %}<{{ a }}|{{ b }}>{% endmacro %}{{ m(1) }}{{ m(1, 2) }}{{ m(b=3, "
       "a=4) }}{{ m() }}",
       "<1|d><1|2><4|3><|d>"},
      {"{% macro m(x) %}{{ x }}{% endmacro %}{{ m('a')|length }} {{ m('ab') is string }} {{ "
       "m(none) }}",
       "1 True None"},
      {"{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(3) }}",
       "321"},
      {"{% set y = 5 %}{% macro m() %}{{ y }}{% endmacro %}{% set y = 6 %}{{ m() }}", "6"},
      {"{% set c = namespace(n=0) %}{% macro bump() %}{% set c.n = c.n + 1 %}{% endmacro %}{{ "
       "bump() }}{{ bump() }}{{ c.n }}",
       "2"},
      {"{% macro m(a, b=a ~ '!') %}{{ b }}{% endmacro %}{{ m('x') }}", "x!"},
  });
}

// the built-in filters, tojson as transformers defines it.
TEST(Jinja, Filters) {
  expect_renders({
      {"{{ d|tojson }} {{ l|tojson }} {{ s|tojson }} {{ 'x\\ny\"\\u0001'|tojson }} {{ 1.0|tojson "
       "}} {{ 'é'|tojson(true) }}",
       "{\"a\": 1, \"items\": 5} [1, \"a\", null, true, 1.5] \"héllo\" \"x\\ny\\\"\\u0001\" 1.0 "
       "\"\\u00e9\""},
      {"{{ {'a': [1, {'b': 2}], 'c': {}, 'e': []}|tojson(indent=2) }}|{{ {'b': 1, 'a': "
       "[]}|tojson(sort_keys=true) }}|{{ {'a': 1}|tojson(separators=[',', ':']) }}",
       "{\n  \"a\": [\n    1,\n    {\n      \"b\": 2\n    }\n  ],\n  \"c\": {},\n  \"e\": "
       "[]\n}|{\"a\": [], \"b\": 1}|{\"a\":1}"},
      {"{{ '  x  '|trim }}|{{ 'xxaxx'|trim('x') }}|{{ 5|trim }}|{{ 'abc'|length }} {{ [1, 2]|count "
       "}} {{ {'a': 1}|length }} {{ u|length }}",
       "x|a|5|3 2 1 0"},
      {"{{ 5|string }} {{ none|string }} {{ [1]|string }} {{ {'a': none}|string }} [{{ u|string "
       "}}]",
       "5 None [1] {'a': None} []"},
      {"{{ 'abc'|list }} {{ d|list }} {{ [1, 2, 3]|join('-') }} {{ [{'n': 'x'}, {'n': "
       "'y'}]|join(',', attribute='n') }}",
       "['a', 'b', 'c'] ['a', 'items'] 1-2-3 x,y"},
      {"{{ [1, 2]|first }} {{ [1, 2]|last }} [{{ []|first }}] {{ 'abc'|first }} {{ "
       "u|default('dflt') }} {{ ''|default('e', true) }} [{{ ''|default('e') }}] {{ "
       "none|default('n') }}",
       "1 2 [] a dflt e [] None"},
      {"{{ 'AbC'|lower }} {{ 'abc'|upper }} {{ 'hello World'|capitalize }} {{ 'aaa'|replace('a', "
       "'b') }} {{ 'aaa'|replace('a', 'b', 2) }} {{ 'x'|safe }}",
       "abc ABC Hello world bbb bba x"},
      {"{{ '42'|int }} {{ '4.5'|int }} {{ 'x'|int }} {{ 'x'|int(7) }} {{ 3.9|int }} {{ true|int }} "
       "{{ '1.5'|float }} {{ 2|float }} {{ -3|abs }}",
       "42 4 0 7 3 1 1.5 2.0 3"},
      {"{{ [{'a': 1}, {'a': 0}, {'b': 1}]|selectattr('a')|list }} {{ [{'a': 1}, {'a': "
       "0}]|rejectattr('a')|list }} {{ msgs|selectattr('role', 'equalto', 'user')|list|length }}",
       "[{'a': 1}] [{'a': 0}] 1"},
      {"{{ [1, 2, 3, 4]|select('odd')|list }} {{ msgs|map(attribute='role')|list }} {{ ['a', "
       "'b']|map('upper')|join }} {{ [1, 2, 3]|reverse|list }}",
       "[1, 3] ['user', 'assistant'] AB [3, 2, 1]"},
  });
}

// is / is not tests.
TEST(Jinja, Tests) {
  expect_renders({
      {"{{ u is defined }} {{ u is undefined }} {{ n is none }} {{ s is string }} {{ 1 is number "
       "}} {{ true is number }} {{ 1 is integer }} {{ true is integer }} {{ 1.0 is float }}",
       "False True True True True True True False True"},
      {"{{ true is boolean }} {{ true is true }} {{ 1 is true }} {{ false is false }} {{ d is "
       "mapping }} {{ l is mapping }} {{ l is iterable }} {{ 1 is iterable }} {{ u is iterable }} "
       "{{ d is sequence }}",
       "True True False True True False True False True True"},
      {"{{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 9 is divisibleby(4) }} {{ 1 is "
       "eq 1 }} {{ 2 is gt 1 }} {{ 'a' is in 'abc' }} {{ s is not string }} {{ none is sameas none "
       "}}",
       "True True True False True True True False True"},
  });
}

// str and dict methods.
TEST(Jinja, Methods) {
  expect_renders({
      {"{{ s.upper() }} {{ '  a b  '.strip() }}|{{ 'xxhixx'.strip('x') }}|{{ '  a'.lstrip() }}|{{ "
       "'a  '.rstrip() }}|{{ '\\n\\nx\\n'.rstrip('\\n') }}|",
       "HÉLLO a b|hi|a|a|\n\nx|"},
      {"{{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }} {{ 'a,b,c'.split(',', 1) }} {{ "
       "'a,b,c'.rsplit(',', 1) }} {{ 'x</think>y'.split('</think>')[-1] }}",
       "['a', 'b', '', 'c'] ['a', 'b'] ['a', 'b,c'] ['a,b', 'c'] y"},
      {"{{ 'hello'.startswith('he') }} {{ 'hello'.endswith('lo') }} {{ 'hello'.startswith(('x', "
       "'h')) }} {{ 'aXbX'.replace('X', '-') }} {{ 'héllo'.find('l') }} {{ 'abcabc'.count('b') }} "
       "{{ ', '.join(['a', 'b']) }}",
       "True True True a-b- 2 2 a, b"},
      {"{{ d.get('a') }} {{ d.get('zz') }} {{ d.get('zz', 9) }} {{ d.keys()|list }} {{ "
       "d.values()|list }}",
       "1 None 9 ['a', 'items'] [1, 5]"},
  });
}

// jinja2's default Undefined.
TEST(Jinja, Undefined) {
  expect_renders({
      {"[{{ u }}] [{{ u|trim }}] [{{ u|list }}] [{{ u|join }}] [{{ u|items|list }}] {{ u == u }} "
       "{{ u is mapping }} {% for x in u %}never{% else %}empty{% endfor %} [{{ l[u] }}] [{{ d[u] "
       "}}] [{{ d.missing }}]",
       "[] [] [[]] [] [[]] True False empty [] [] []"},
  });
}

// range, dict, namespace.
TEST(Jinja, Globals) {
  expect_renders({
      {"{{ range(3)|list }} {{ range(1, 4)|list }} {{ range(5, 0, -2)|list }} {{ dict(a=1, b='x') "
       "}} {{ namespace(k=1).k }}",
       "[0, 1, 2] [1, 2, 3] [5, 3, 1] {'a': 1, 'b': 'x'} 1"},
  });
}

TEST(Jinja, SyntaxErrors) {
  expect_errors({
      {"{% if %}", "1: syntax error"},
      {"line1\n{% for x in %}{% endfor %}", "2: syntax error"},
      {"{% endif %}", "unknown tag 'endif'"},
      {"a\nb\n{% if true %}", "expected 'elif' or 'else' or 'endif'"},
      {"{{ }}", "Expected an expression"},
      {"\n\n\n{{ 1 + }}", "4: syntax error"},
      {"{% generation %}x{% endgeneration %}", "unknown tag 'generation'"},
      {"{{ x|nosuchfilter }}", "No filter named 'nosuchfilter'"},
      {"{{ x is nosuchtest }}", "No test named 'nosuchtest'"},
      {"{{ (1 }}", "unexpected '}', expected ')'"},
      {"{{ 'abc }}", "unexpected char"},
      {"x\n{# unterminated", "2: syntax error: Missing end of comment tag"},
      {"{% set 1 = 2 %}", "can't assign"},
      {"{% macro m(a=1, b) %}{% endmacro %}", "non-default argument follows default argument"},
      {"{% include 'x.j2' %}", "not supported"},
      {"{{ a is defined is defined }}", "syntax error"},
  });
}

TEST(Jinja, RuntimeErrors) {
  expect_errors({
      {"{{ 1 < 'a' }}", "TypeError: '<' not supported between instances of 'int' and 'str'"},
      {"{{ none + 1 }}", "TypeError"},
      {"\n{{ u + 1 }}", "2: UndefinedError: 'u' is undefined"},
      {"{{ u.attr }}", "UndefinedError: 'u' is undefined"},
      {"{{ u() }}", "UndefinedError"},
      {"{{ 'a'() }}", "not callable"},
      {"{% for k, v in 1|items %}{% endfor %}", "Can only get item pairs from a mapping"},
      {"{{ u|tojson }}", "not JSON serializable"},
      {"{{ range(100001)|length }}", "MAX_RANGE"},
      {"{{ 'a' in 1 }}", "not iterable"},
      {"{{ 1 in 'a' }}", "requires string as left operand"},
      {"{{ 1 / 0 }}", "division by zero"},
      {"{% for a, b in [[1]] %}{% endfor %}", "not enough values to unpack"},
      {"{% set x = 1 %}{% set x.y = 2 %}", "non-namespace"},
      {"{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}", "takes not more than 1 argument"},
      {"{% macro m(a) %}{% endmacro %}{{ m(q=1) }}", "no keyword argument 'q'"},
      {"{{ 'x'.split('') }}", "empty separator"},
      {"{{ [1][::0] }}", "slice step cannot be zero"},
      {"{{ raise_exception('custom message') }}", "custom message"},
      {"{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}", "recursion"},
  });
}

// jinja2's compile-time scoping: a name assigned later in a frame is Undefined before.
TEST(Jinja, Scoping) {
  expect_renders({
      {"{% for i in [1] %}[{{ x }}]{% endfor %}{% set x = 'late' %}{{ x }}", "[]late"},
      {"{% macro m() %}[{{ x }}]{% endmacro %}{{ m() }}{% set x = 'late' %}{{ m() }}", "[][late]"},
      {"{% for i in [1] %}[{{ x }}]{% endfor %}{% if true %}{% set x = 'branch' %}{% endif %}{{ x "
       "}}",
       "[X]branch"},
      {"{% for i in [1] %}[{{ x }}]{% endfor %}{% if true %}{% set x = 1 %}{% else %}{% set x = 2 "
       "%}{% endif %}{{ x }}",
       "[X]1"},
      {"{{ x }}{% for i in [1] %}[{{ x }}]{% endfor %}{% set x = 'late' %}{{ x }}", "X[X]late"},
      {"{% for m in [1] %}{% for i in [1] %}[{{ x }}]{% endfor %}{% set x = 2 %}{{ x }}{% endfor "
       "%}{{ x }}",
       "[X]2X"},
      {"{% set x = x ~ '!' %}{{ x }}{% macro m(x) %}{{ x }}{% endmacro %}{{ m('p') }}", "X!p"},
      {"{% for i in [1, 2] %}{% for j in [1] %}{{ x }}{% endfor %}{% set x = i %}{% endfor %}", ""},
      {"{% for i in [1, 2] %}{{ x }}{% set x = i %}{{ x }}{% endfor %}", "X1X2"},
      {"{% set y %}{% for i in [1] %}{{ z }}{% endfor %}{% set z = 1 %}{{ z }}{% endset %}[{{ y "
       "}}]",
       "[1]"},
  });
}

// for-else runs unless an iteration reached the end of the body; break/continue in set blocks.
TEST(Jinja, ForElse) {
  expect_renders({
      {"{% for i in [1, 2] %}{% continue %}{% else %}E{% endfor %}", "E"},
      {"{% for i in [1, 2] %}{% break %}{% else %}E{% endfor %}", "E"},
      {"{% for i in [1, 2] %}{% if i == 2 %}{% break %}{% endif %}{% else %}E{% endfor %}", ""},
      {"{% for i in [1, 2] %}{% if i == 1 %}{% continue %}{% endif %}{{ i }}{% else %}E{% endfor "
       "%}",
       "2"},
      {"{% for i in [1, 2, 3] %}{% set y %}a{% if i == 2 %}{% break %}{% endif %}{% endset %}{{ y "
       "}}{% endfor %}",
       "a"},
      {"{% for i in [1, 2, 3] %}{% set y %}{{ i }}{% if i == 2 %}{% continue %}{% endif %}{% "
       "endset %}{{ y }}{% endfor %}",
       "13"},
  });
}

// select/map/items results behave like Python generators (always true, no len).
TEST(Jinja, Generators) {
  expect_renders({
      {"{{ 'yes' if [] | select else 'no' }} {{ 'yes' if {}|items else 'no' }} {{ [1]|select is "
       "iterable }} {{ [1]|select is sequence }}",
       "yes yes True False"},
      {"{{ msgs|selectattr('role', 'eq', 'user')|first }} {{ msgs|map(attribute='role')|join('/') "
       "}} {{ (d|items|list)[0][1] }}",
       "{'role': 'user', 'content': 'hi'} user/assistant 1"},
      {"{% set g = 1|items %}{{ g is iterable }}{% if g %}truthy{% endif %}", "Truetruthy"},
  });
}

// Undefined stored inside lists and dicts.
TEST(Jinja, UndefinedInContainers) {
  expect_renders({
      {"{{ [u, 1] }} {{ {'k': u} }} {{ [u]|length }} {{ u in [u] }} {{ [u][0] is defined }}",
       "[Undefined, 1] {'k': Undefined} 1 True False"},
  });
}

// odd/even/divisibleby on floats.
TEST(Jinja, NumericTestsOnFloats) {
  expect_renders({
      {"{{ 2.5 is odd }} {{ 2.0 is even }} {{ 3.0 is odd }} {{ 7.5 is divisibleby 2.5 }} {{ -3 is "
       "odd }}",
       "False True True True True"},
  });
}

TEST(Jinja, GeneratorsErrors) {
  expect_errors({
      {"{{ [1]|select|length }}", "has no len()"},
      {"{{ [1]|map('string')|tojson }}", "not JSON serializable"},
      {"{% for k, v in 1|items %}{% endfor %}", "Can only get item pairs from a mapping"},
  });
}

TEST(Jinja, UndefinedErrors) {
  expect_errors({
      {"{{ [u]|tojson }}", "not JSON serializable"},
  });
}

TEST(Jinja, ForElseErrors) {
  expect_errors({
      {"{% macro m() %}{% break %}{% endmacro %}", "outside of a loop"},
  });
}

TEST(Jinja, ErrorKindsAndLines) {
  RenderError e;
  auto t = Template::parse("a\n{{ raise_exception('stop') }}", "tpl", &e);
  ASSERT_TRUE(t.ok());
  auto out = t->render(Json::object(), &e);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.message(), "tpl:2: stop");
  EXPECT_EQ(e.kind, ErrorKind::raised);
  EXPECT_EQ(e.line, 2);
  EXPECT_EQ(e.message, "stop");

  EXPECT_FALSE(Template::parse("\n\n{% for %}", "tpl", &e).ok());
  EXPECT_EQ(e.kind, ErrorKind::syntax);
  EXPECT_EQ(e.line, 3);

  EXPECT_FALSE(Template::parse("ok\xff", "tpl", &e).ok());  // not UTF-8
  EXPECT_EQ(e.kind, ErrorKind::syntax);

  auto u = Template::parse("{{ x.y }}");
  ASSERT_TRUE(u.ok());
  EXPECT_FALSE(u->render(Json::object(), &e).ok());
  EXPECT_EQ(e.kind, ErrorKind::undefined);
  EXPECT_FALSE(u->render(Json::array()).ok());  // variables must be an object
}

TEST(Jinja, TemplateIsReusable) {
  auto t = Template::parse("{% for m in messages %}{{ m }};{% endfor %}");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(*t->render(Json{{"messages", {1, 2}}}), "1;2;");
  EXPECT_EQ(*t->render(Json{{"messages", {"a"}}}), "a;");
  EXPECT_EQ(*t->render(Json::object()), "");
}

// Resource limits: Python would raise (RecursionError, OverflowError) or run out of memory;
// orchid reports an error instead of exhausting the stack or the heap.
TEST(Jinja, LimitsAreErrorsNotCrashes) {
  const std::string deep_parens =
      "{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}";
  const std::string deep_lists = "{{ " + std::string(5000, '[') + std::string(5000, ']') + " }}";
  const std::string deep_not = "{{ " + [] {
    std::string s;
    for (int i = 0; i < 5000; ++i) s += "not ";
    return s;
  }() + "1 }}";
  std::string deep_ifs;
  for (int i = 0; i < 2000; ++i) deep_ifs += "{% if true %}";
  const char* huge[] = {
      "{{ 'x' * 100000000000 }}",
      ("{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}"
       "{% endfor %}{{ ns.s }}"),
      "{{ [1] * 100000000000 }}",
      "{{ 9223372036854775807 + 1 }}",
      "{{ 2 ** 64 }}",
      "{{ {}|tojson(indent=100000000) }}",
  };
  std::vector<std::string> sources = {deep_parens, deep_lists, deep_not, deep_ifs};
  sources.insert(sources.end(), std::begin(huge), std::end(huge));
  for (const std::string& src : sources) {
    SCOPED_TRACE(src.substr(0, 80));
    auto t = Template::parse(src);
    if (t.ok()) {
      auto out = t->render(Json::object());
      EXPECT_FALSE(out.ok());
    }
  }
}

// Data nested past kMaxDataDepth: every walk that recurses per level (tojson, repr, ==, <, in,
// a namespace holding itself) fails with a limit error; data just inside the bound renders.
TEST(Jinja, DeepDataIsALimitErrorInEveryWalk) {
  // [[[...[1]...]]] `levels` deep, built without recursion.
  auto nested = [](int levels) {
    Json j = 1;
    for (int i = 0; i < levels; ++i) {
      Json outer = Json::array();
      outer.push_back(std::move(j));
      j = std::move(outer);
    }
    return j;
  };
  const Json deep{{"x", nested(kMaxDataDepth + 50)}, {"y", nested(kMaxDataDepth + 50)}};
  for (const char* src : {"{{ x|tojson }}", "{{ x }}", "{{ x|string }}", "{{ x == y }}",
                          "{{ x < y }}", "{{ x in [y] }}", "{{ [x]|tojson(indent=1) }}"}) {
    SCOPED_TRACE(src);
    auto t = Template::parse(src);
    ASSERT_TRUE(t.ok()) << t.message();
    auto out = t->render(deep);
    ASSERT_FALSE(out.ok()) << out->substr(0, 80);
    EXPECT_NE(out.message().find("levels deep"), std::string::npos) << out.message();
  }
  // Namespaces nest too (a chain, not a cycle: a namespace holding itself would leak).
  auto self = Template::parse(
      "{% set h = namespace(v=1) %}{% for i in range(600) %}{% set h.v = namespace(inner=h.v) %}"
      "{% endfor %}{{ h }}");
  ASSERT_TRUE(self.ok()) << self.message();
  auto out = self->render(Json::object());
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.message().find("levels deep"), std::string::npos) << out.message();
  // Inside the bound every walk works.
  const Json fine{{"x", nested(kMaxDataDepth - 2)}, {"y", nested(kMaxDataDepth - 2)}};
  auto t = Template::parse("{{ x == y }} {{ (x|tojson)|length }} {{ (x|string)|length }}");
  ASSERT_TRUE(t.ok());
  auto ok = t->render(fine);
  ASSERT_TRUE(ok.ok()) << ok.message();
  const std::string n = std::to_string(2 * (kMaxDataDepth - 2) + 1);
  EXPECT_EQ(*ok, "True " + n + " " + n);
}

// Random token soup and random bytes: every input parses or fails with a message, and every
// parsed template renders or fails with a message.
TEST(Jinja, GarbageNeverCrashes) {
  static const char* const kPieces[] = {"{{",
                                        "}}",
                                        "{%",
                                        "%}",
                                        "{#",
                                        "#}",
                                        "{%-",
                                        "-%}",
                                        "{{-",
                                        "-}}",
                                        "+%}",
                                        "{%+",
                                        " ",
                                        "\n",
                                        "if",
                                        "elif",
                                        "else",
                                        "endif",
                                        "for",
                                        "in",
                                        "endfor",
                                        "set",
                                        "endset",
                                        "macro",
                                        "endmacro",
                                        "break",
                                        "continue",
                                        "raw",
                                        "endraw",
                                        "x",
                                        "messages",
                                        "loop",
                                        "ns",
                                        "namespace(a=1)",
                                        "(",
                                        ")",
                                        "[",
                                        "]",
                                        "{",
                                        "}",
                                        ",",
                                        ":",
                                        ".",
                                        "|",
                                        "=",
                                        "==",
                                        "~",
                                        "+",
                                        "-",
                                        "*",
                                        "/",
                                        "//",
                                        "%",
                                        "**",
                                        "'s'",
                                        "\"q\\\"\"",
                                        "'\\x4",
                                        "1",
                                        "1.5",
                                        "0x",
                                        "1e",
                                        "not",
                                        "and",
                                        "or",
                                        "is",
                                        "defined",
                                        "none",
                                        "tojson",
                                        "items",
                                        "trim",
                                        "length",
                                        "join(",
                                        "raise_exception(",
                                        "range(",
                                        "a.b",
                                        "[::-1]",
                                        "[1:]",
                                        "é",
                                        "\xe2\x80",
                                        "\\",
                                        "'",
                                        "\""};
  constexpr size_t kN = sizeof(kPieces) / sizeof(kPieces[0]);
  uint64_t state = 0x9E3779B97F4A7C15ull;
  auto next = [&] {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  };
  const Json v =
      Json::parse(R"({"x": [1, {"a": "b"}], "messages": [{"role": "user", "content": "hi"}]})");
  int parsed = 0;
  for (int i = 0; i < 4000; ++i) {
    std::string src;
    const int len = int(next() % 24);
    for (int k = 0; k < len; ++k) {
      if (i % 5 == 0) {
        src += char(next() % 256);
      } else {
        src += kPieces[next() % kN];
      }
    }
    auto t = Template::parse(src);
    if (!t.ok()) {
      EXPECT_FALSE(t.message().empty());
      continue;
    }
    ++parsed;
    auto out = t->render(v);
    if (!out.ok()) {
      EXPECT_FALSE(out.message().empty());
    }
  }
  EXPECT_GT(parsed, 100);  // the soup is not all syntax errors
}

}  // namespace
}  // namespace orchid::jinja

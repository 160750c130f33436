// Jinja2's built-in filters, tests and globals (see builtins.h). Each follows the Python
// function of the same name in jinja2/filters.py / tests.py / defaults.py 3.1, except tojson,
// which is the one transformers installs: json.dumps(x, ensure_ascii=False, indent=None,
// separators=None, sort_keys=False).
#include "orchid/tokenizer/jinja/builtins.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <ctime>
#include <unordered_map>

#include "orchid/tokenizer/jinja/pystr.h"

namespace orchid::jinja {
namespace {

using FilterFn = Value (*)(const Value&, CallArgs&);
using TestFn = bool (*)(const Value&, CallArgs&);

// The sandbox refuses ranges longer than this (jinja2.sandbox.MAX_RANGE).
constexpr int64_t kMaxRange = 100000;

Value str_value(std::string s) {
  return Value(Json(std::move(s)));
}

// ---- filters ----

Value f_tojson(const Value& in, CallArgs& a) {
  auto b = bind_args("tojson", a, {"ensure_ascii", "indent", "separators", "sort_keys"});
  if (!in.is_data() || in.is_generator())
    type_error("Object of type " + type_name(in) + " is not JSON serializable");
  DumpOptions o;
  o.ensure_ascii = b[0] && truthy(*b[0]);
  if (b[1] && !b[1]->is_none()) {
    int64_t n = 0;
    if (b[1]->is_string()) {
      o.indent = b[1]->str();
    } else if (as_int(*b[1], n)) {
      if (n > 1000) fail(ErrorKind::limit, "tojson indent larger than 1000");
      o.indent = std::string(size_t(std::max<int64_t>(n, 0)), ' ');
    } else {
      type_error("tojson indent must be an int or a str, not " + type_name(*b[1]));
    }
    o.item_sep = ",";
  }
  if (b[2] && !b[2]->is_none()) {
    const Value& s = *b[2];
    if (!s.is_list() || s.data().size() != 2 || !s.data()[0].is_string() ||
        !s.data()[1].is_string())
      type_error("tojson separators must be a pair of strings");
    o.item_sep = s.data()[0].get<std::string>();
    o.key_sep = s.data()[1].get<std::string>();
  }
  o.sort_keys = b[3] && truthy(*b[3]);
  return str_value(dumps(in.data(), o));
}

Value f_trim(const Value& in, CallArgs& a) {
  auto b = bind_args("trim", a, {"chars"});
  std::optional<std::string> chars;
  if (b[0] && !b[0]->is_none()) chars = to_str(*b[0]);
  return str_value(py::strip(to_str(in), chars, true, true));
}

Value f_length(const Value& in, CallArgs& a) {
  bind_args("length", a, {});
  return Value(Json(int64_t(length(in))));
}

Value f_string(const Value& in, CallArgs& a) {
  bind_args("string", a, {});
  return in.is_string() ? in : str_value(to_str(in));
}

Value f_items(const Value& in, CallArgs& a) {
  bind_args("items", a, {});
  if (in.is_undefined()) return Value::generator(Json::array());
  // do_items is a generator function: a non-mapping fails only when iterated.
  if (!in.is_dict())
    return Value::generator(Json::array(), "Can only get item pairs from a mapping.");
  Json out = Json::array();
  for (auto it = in.data().begin(); it != in.data().end(); ++it)
    out.push_back(Json::array({it.key(), it.value()}));
  return Value::generator(std::move(out));
}

Value list_of(const std::vector<Value>& items, bool generator = false) {
  Json out = Json::array();
  for (const Value& v : items) out.push_back(to_json(v));
  return generator ? Value::generator(std::move(out)) : Value(std::move(out));
}

Value f_list(const Value& in, CallArgs& a) {
  bind_args("list", a, {});
  return in.is_list() ? in : list_of(iterate(in));
}

// make_attrgetter: "a.b.0" looks up a, then b, then item 0.
Value attribute_path(const Value& item, const std::string& path) {
  Value v = item;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? dot : dot - start);
    int64_t idx = 0;
    const auto r = std::from_chars(part.data(), part.data() + part.size(), idx);
    const bool numeric = !part.empty() && r.ec == std::errc() && r.ptr == part.data() + part.size();
    v = get_item(v, numeric ? Value(Json(idx)) : Value(Json(part)));
    if (dot == std::string::npos) return v;
    start = dot + 1;
  }
}

Value f_join(const Value& in, CallArgs& a) {
  auto b = bind_args("join", a, {"d", "attribute"});
  const std::string sep = b[0] ? to_str(*b[0]) : "";
  std::string out;
  bool first = true;
  for (const Value& item : iterate(in)) {
    if (!first) out += sep;
    first = false;
    out += to_str(b[1] && !b[1]->is_none() ? attribute_path(item, to_str(*b[1])) : item);
  }
  return str_value(std::move(out));
}

Value f_first(const Value& in, CallArgs& a) {
  bind_args("first", a, {});
  std::vector<Value> items = iterate(in);
  return items.empty() ? Value::undefined("No first item, sequence was empty.") : items.front();
}

Value f_last(const Value& in, CallArgs& a) {
  bind_args("last", a, {});
  if (in.is_generator()) type_error("'generator' object is not reversible");
  std::vector<Value> items = iterate(in);
  return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
}

Value f_default(const Value& in, CallArgs& a) {
  auto b = bind_args("default", a, {"default_value", "boolean"});
  const bool boolean = b[1] && truthy(*b[1]);
  if (in.is_undefined() || (boolean && !truthy(in))) return b[0] ? *b[0] : str_value("");
  return in;
}

Value f_lower(const Value& in, CallArgs& a) {
  bind_args("lower", a, {});
  return str_value(py::lower(to_str(in)));
}

Value f_upper(const Value& in, CallArgs& a) {
  bind_args("upper", a, {});
  return str_value(py::upper(to_str(in)));
}

Value f_capitalize(const Value& in, CallArgs& a) {
  bind_args("capitalize", a, {});
  return str_value(py::capitalize(to_str(in)));
}

Value f_replace(const Value& in, CallArgs& a) {
  auto b = bind_args("replace", a, {"old", "new", "count"});
  if (!b[0] || !b[1]) type_error("replace() missing required arguments 'old' and 'new'");
  int64_t count = -1;
  if (b[2] && !b[2]->is_none() && !as_int(*b[2], count))
    type_error("replace() count must be an integer");
  return str_value(py::replace(to_str(in), to_str(*b[0]), to_str(*b[1]), count));
}

Value f_safe(const Value& in, CallArgs& a) {
  bind_args("safe", a, {});
  return in.is_string() ? in : str_value(to_str(in));  // Markup(value) is a str
}

// Python float(str): optional whitespace, sign, digits with single underscores, inf/nan.
std::optional<double> parse_float(const std::string& text) {
  std::string s = py::strip(text, std::nullopt, true, true);
  std::string t;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '_' && i > 0 && i + 1 < s.size() && std::isdigit((unsigned char)s[i - 1]) &&
        std::isdigit((unsigned char)s[i + 1]))
      continue;
    t += s[i];
  }
  const char* p = t.data();
  if (!t.empty() && t[0] == '+') ++p;
  double d = 0;
  const auto r = std::from_chars(p, t.data() + t.size(), d);
  if (t.empty() || r.ec != std::errc() || r.ptr != t.data() + t.size()) return std::nullopt;
  return d;
}

// Python int(str, base) for base 2..36; nullopt when it raises ValueError.
std::optional<int64_t> parse_int(const std::string& text, int base) {
  std::string s = py::strip(text, std::nullopt, true, true);
  bool neg = false;
  size_t i = 0;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) neg = s[i++] == '-';
  std::string digits;
  for (; i < s.size(); ++i) {
    if (s[i] == '_' && !digits.empty() && i + 1 < s.size() && s[i + 1] != '_') continue;
    digits += s[i];
  }
  if (digits.empty()) return std::nullopt;
  int64_t v = 0;
  const auto r = std::from_chars(digits.data(), digits.data() + digits.size(), v, base);
  if (r.ec != std::errc() || r.ptr != digits.data() + digits.size()) return std::nullopt;
  return neg ? -v : v;
}

Value f_int(const Value& in, CallArgs& a) {
  auto b = bind_args("int", a, {"default", "base"});
  const Value dflt = b[0] ? *b[0] : Value(Json(0));
  int64_t base = 10;
  if (b[1] && !as_int(*b[1], base)) type_error("int() base must be an integer");
  if (base < 2 || base > 36) fail(ErrorKind::unsupported, "int() base must be in 2..36");
  if (in.is_undefined()) undefined_error(in);
  int64_t i = 0;
  if (as_int(in, i)) return Value(Json(i));
  std::optional<double> d;
  if (in.is_string()) {
    if (auto v = parse_int(in.str(), int(base))) return Value(Json(*v));
    d = parse_float(in.str());
  } else if (in.is_float()) {
    d = in.data().get<double>();
  }
  if (!d || std::isnan(*d)) return dflt;
  if (std::isinf(*d)) type_error("cannot convert float infinity to integer");
  if (std::fabs(*d) >= 9.2e18) fail(ErrorKind::unsupported, "integer too large");
  return Value(Json(int64_t(std::trunc(*d))));
}

Value f_float(const Value& in, CallArgs& a) {
  auto b = bind_args("float", a, {"default"});
  const Value dflt = b[0] ? *b[0] : Value(Json(0.0));
  if (in.is_undefined()) undefined_error(in);
  double d = 0;
  if (as_number(in, d)) return Value(Json(d));
  if (in.is_string())
    if (auto v = parse_float(in.str())) return Value(Json(*v));
  return dflt;
}

Value f_abs(const Value& in, CallArgs& a) {
  bind_args("abs", a, {});
  int64_t i = 0;
  if (!in.is_float() && as_int(in, i)) return Value(Json(i < 0 ? -i : i));
  if (in.is_float()) return Value(Json(std::fabs(in.data().get<double>())));
  type_error("bad operand type for abs(): '" + type_name(in) + "'");
}

Value f_reverse(const Value& in, CallArgs& a) {
  bind_args("reverse", a, {});
  if (in.is_string()) {
    std::vector<char32_t> cps = py::code_points(in.str());
    std::reverse(cps.begin(), cps.end());
    return str_value(py::from_code_points(cps, 0, cps.size()));
  }
  // reversed(seq) is an iterator; a generator is not reversible, so jinja2 makes a list.
  std::vector<Value> items = iterate(in);
  std::reverse(items.begin(), items.end());
  return list_of(items, !in.is_generator());
}

// select / reject / selectattr / rejectattr: keep items whose (attribute) value passes the
// test named by the next argument (truthiness when there is none).
Value select_or_reject(const Value& in, CallArgs& a, bool with_attr, bool keep_if) {
  std::vector<Value> rest = a.pos;
  if (!a.kw.empty()) fail(ErrorKind::unsupported, "keyword arguments to select filters");
  std::string attr;
  if (with_attr) {
    if (rest.empty()) type_error("selectattr/rejectattr need an attribute name");
    attr = to_str(rest.front());
    rest.erase(rest.begin());
  }
  std::string test;
  if (!rest.empty()) {
    test = to_str(rest.front());
    rest.erase(rest.begin());
    if (!has_test(test)) fail(ErrorKind::type, "No test named '" + test + "'.");
  }
  std::vector<Value> kept;
  for (const Value& item : iterate(in)) {
    const Value v = with_attr ? attribute_path(item, attr) : item;
    CallArgs targs{rest, {}};
    const bool pass = test.empty() ? truthy(v) : apply_test(test, v, targs);
    if (pass == keep_if) kept.push_back(item);
  }
  return list_of(kept, true);
}

Value f_selectattr(const Value& in, CallArgs& a) {
  return select_or_reject(in, a, true, true);
}
Value f_rejectattr(const Value& in, CallArgs& a) {
  return select_or_reject(in, a, true, false);
}
Value f_select(const Value& in, CallArgs& a) {
  return select_or_reject(in, a, false, true);
}
Value f_reject(const Value& in, CallArgs& a) {
  return select_or_reject(in, a, false, false);
}

Value f_map(const Value& in, CallArgs& a) {
  std::vector<Value> out;
  if (a.pos.empty()) {
    auto b = bind_args("map", a, {"attribute", "default"});
    if (!b[0]) type_error("map() needs a filter name or attribute=");
    const std::string attr = to_str(*b[0]);
    for (const Value& item : iterate(in)) {
      Value v = attribute_path(item, attr);
      out.push_back(v.is_undefined() && b[1] ? *b[1] : v);
    }
    return list_of(out, true);
  }
  const std::string name = to_str(a.pos.front());
  if (!has_filter(name)) fail(ErrorKind::type, "No filter named '" + name + "'.");
  for (const Value& item : iterate(in)) {
    CallArgs fargs{std::vector<Value>(a.pos.begin() + 1, a.pos.end()), a.kw};
    out.push_back(apply_filter(name, item, fargs));
  }
  return list_of(out, true);
}

const std::unordered_map<std::string_view, FilterFn>& filters() {
  static const std::unordered_map<std::string_view, FilterFn> kFilters = {
      {"tojson", f_tojson},
      {"trim", f_trim},
      {"length", f_length},
      {"count", f_length},
      {"string", f_string},
      {"items", f_items},
      {"list", f_list},
      {"join", f_join},
      {"first", f_first},
      {"last", f_last},
      {"default", f_default},
      {"d", f_default},
      {"lower", f_lower},
      {"upper", f_upper},
      {"capitalize", f_capitalize},
      {"replace", f_replace},
      {"safe", f_safe},
      {"int", f_int},
      {"float", f_float},
      {"abs", f_abs},
      {"reverse", f_reverse},
      {"selectattr", f_selectattr},
      {"rejectattr", f_rejectattr},
      {"select", f_select},
      {"reject", f_reject},
      {"map", f_map},
  };
  return kFilters;
}

// ---- tests ----

const Value& test_arg(CallArgs& a, const char* test) {
  if (a.pos.size() != 1 || !a.kw.empty())
    type_error(std::string("test '") + test + "' takes exactly one argument");
  return a.pos[0];
}

bool t_defined(const Value& v, CallArgs&) {
  return !v.is_undefined();
}
bool t_undefined(const Value& v, CallArgs&) {
  return v.is_undefined();
}
bool t_none(const Value& v, CallArgs&) {
  return v.is_none();
}
bool t_string(const Value& v, CallArgs&) {
  return v.is_string();
}
bool t_number(const Value& v, CallArgs&) {
  return v.is_data() && (v.data().is_number() || v.is_bool());
}
bool t_integer(const Value& v, CallArgs&) {
  return v.is_int();
}
bool t_float(const Value& v, CallArgs&) {
  return v.is_float();
}
bool t_boolean(const Value& v, CallArgs&) {
  return v.is_bool();
}
bool t_true(const Value& v, CallArgs&) {
  return v.is_bool() && v.data().get<bool>();
}
bool t_false(const Value& v, CallArgs&) {
  return v.is_bool() && !v.data().get<bool>();
}
bool t_mapping(const Value& v, CallArgs&) {
  return v.is_dict();
}
// Undefined is iterable and a sequence in jinja2 (it has __iter__, __len__, __getitem__);
// a generator is iterable only.
bool t_sequence(const Value& v, CallArgs&) {
  return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
}
bool t_iterable(const Value& v, CallArgs& a) {
  return v.is_generator() || t_sequence(v, a);
}
bool t_callable(const Value& v, CallArgs&) {
  return v.is_callable();
}
bool t_lower(const Value& v, CallArgs&) {
  const std::string s = to_str(v);
  return py::lower(s) == s && py::upper(s) != s;
}
bool t_upper(const Value& v, CallArgs&) {
  const std::string s = to_str(v);
  return py::upper(s) == s && py::lower(s) != s;
}
// value % divisor with Python's sign rule (the remainder takes the divisor's sign).
double py_mod(const Value& v, const Value& divisor) {
  int64_t a = 0, b = 0;
  if (!v.is_float() && !divisor.is_float() && as_int(v, a) && as_int(divisor, b)) {
    if (b == 0) type_error("integer division or modulo by zero");
    int64_t m = a % b;
    if (m != 0 && ((m < 0) != (b < 0))) m += b;
    return double(m);
  }
  double x = 0, y = 0;
  if (!as_number(v, x) || !as_number(divisor, y))
    type_error("unsupported operand type(s) for %: '" + type_name(v) + "' and '" +
               type_name(divisor) + "'");
  if (y == 0) type_error("float modulo");
  double m = std::fmod(x, y);
  if (m != 0 && ((m < 0) != (y < 0))) m += y;
  return m;
}
bool t_odd(const Value& v, CallArgs&) {
  return py_mod(v, Value(Json(2))) == 1;
}
bool t_even(const Value& v, CallArgs&) {
  return py_mod(v, Value(Json(2))) == 0;
}
bool t_divisibleby(const Value& v, CallArgs& a) {
  return py_mod(v, test_arg(a, "divisibleby")) == 0;
}
bool t_eq(const Value& v, CallArgs& a) {
  return equal(v, test_arg(a, "eq"));
}
bool t_ne(const Value& v, CallArgs& a) {
  return !equal(v, test_arg(a, "ne"));
}
bool t_lt(const Value& v, CallArgs& a) {
  return less(v, test_arg(a, "lt"), "<");
}
bool t_le(const Value& v, CallArgs& a) {
  const Value& o = test_arg(a, "le");
  return less(v, o, "<=") || equal(v, o);
}
bool t_gt(const Value& v, CallArgs& a) {
  return less(test_arg(a, "gt"), v, ">");
}
bool t_ge(const Value& v, CallArgs& a) {
  const Value& o = test_arg(a, "ge");
  return less(o, v, ">=") || equal(v, o);
}
bool t_in(const Value& v, CallArgs& a) {
  return contains(test_arg(a, "in"), v);
}
// `is sameas`: identity. None/True/False are singletons; other values are the same object
// only when they view the same node.
bool t_sameas(const Value& v, CallArgs& a) {
  const Value& o = test_arg(a, "sameas");
  if (v.is_data() && o.is_data()) {
    if (v.data().is_null() || v.data().is_boolean())
      return v.data() == o.data() && v.data().type() == o.data().type();
    return &v.data() == &o.data();
  }
  return equal(v, o);
}
bool t_filter(const Value& v, CallArgs&) {
  return v.is_string() && has_filter(v.str());
}
bool t_test(const Value& v, CallArgs&) {
  return v.is_string() && has_test(v.str());
}
bool t_escaped(const Value&, CallArgs&) {
  return false;
}

const std::unordered_map<std::string_view, TestFn>& tests() {
  static const std::unordered_map<std::string_view, TestFn> kTests = {
      {"defined", t_defined},
      {"undefined", t_undefined},
      {"none", t_none},
      {"string", t_string},
      {"number", t_number},
      {"integer", t_integer},
      {"float", t_float},
      {"boolean", t_boolean},
      {"true", t_true},
      {"false", t_false},
      {"mapping", t_mapping},
      {"iterable", t_iterable},
      {"sequence", t_sequence},
      {"callable", t_callable},
      {"lower", t_lower},
      {"upper", t_upper},
      {"odd", t_odd},
      {"even", t_even},
      {"divisibleby", t_divisibleby},
      {"eq", t_eq},
      {"equalto", t_eq},
      {"==", t_eq},
      {"ne", t_ne},
      {"!=", t_ne},
      {"lt", t_lt},
      {"lessthan", t_lt},
      {"<", t_lt},
      {"le", t_le},
      {"<=", t_le},
      {"gt", t_gt},
      {"greaterthan", t_gt},
      {">", t_gt},
      {"ge", t_ge},
      {">=", t_ge},
      {"in", t_in},
      {"sameas", t_sameas},
      {"filter", t_filter},
      {"test", t_test},
      {"escaped", t_escaped},
  };
  return kTests;
}

// ---- globals ----

Value make_fn(std::string name, std::function<Value(CallArgs&)> fn) {
  auto c = std::make_shared<Callable>();
  c->name = std::move(name);
  c->fn = std::move(fn);
  return Value::of(std::shared_ptr<const Callable>(std::move(c)));
}

Value g_range(CallArgs& a) {
  if (!a.kw.empty()) type_error("range() takes no keyword arguments");
  if (a.pos.empty() || a.pos.size() > 3)
    type_error("range expected 1 to 3 arguments, got " + std::to_string(a.pos.size()));
  int64_t v[3] = {0, 0, 1};
  for (size_t i = 0; i < a.pos.size(); ++i) {
    int64_t x = 0;
    if (a.pos[i].is_float() || !as_int(a.pos[i], x))
      type_error("'" + type_name(a.pos[i]) + "' object cannot be interpreted as an integer");
    v[a.pos.size() == 1 ? 1 : i] = x;
  }
  const int64_t start = v[0], stop = v[1], step = v[2];
  if (step == 0) type_error("range() arg 3 must not be zero");
  const __int128 span = step > 0 ? __int128(stop) - start : __int128(start) - stop;
  const __int128 n =
      span <= 0 ? 0 : (span + (step > 0 ? step : -step) - 1) / (step > 0 ? step : -step);
  if (n > kMaxRange)
    fail(ErrorKind::limit,
         "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
  Json out = Json::array();
  for (int64_t i = 0; i < int64_t(n); ++i) out.push_back(start + i * step);
  return Value(std::move(out));
}

Value g_dict(CallArgs& a) {
  if (!a.pos.empty()) fail(ErrorKind::unsupported, "dict() with positional arguments");
  Json out = Json::object();
  for (auto& [k, v] : a.kw) out[k] = to_json(v);
  return Value(std::move(out));
}

Value g_namespace(CallArgs& a) {
  auto ns = std::make_shared<Object>();
  if (a.pos.size() > 1) type_error("namespace() takes at most one positional argument");
  if (a.pos.size() == 1) {
    if (!a.pos[0].is_dict()) type_error("namespace() argument must be a mapping");
    for (auto it = a.pos[0].data().begin(); it != a.pos[0].data().end(); ++it)
      ns->set(it.key(), a.pos[0].child(it.value()));
  }
  for (auto& [k, v] : a.kw) ns->set(k, v);
  return Value::of(std::move(ns));
}

Value g_raise_exception(CallArgs& a) {
  auto b = bind_args("raise_exception", a, {"message"});
  fail(ErrorKind::raised, b[0] ? to_str(*b[0]) : "");
}

Value g_strftime_now(CallArgs& a) {
  auto b = bind_args("strftime_now", a, {"format"});
  if (!b[0] || !b[0]->is_string()) type_error("strftime_now() argument must be str");
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char buf[512];
  const size_t n = std::strftime(buf, sizeof buf, b[0]->str().c_str(), &tm);
  return str_value(std::string(buf, n));
}

}  // namespace

bool has_filter(std::string_view name) {
  return filters().count(name) > 0;
}
bool has_test(std::string_view name) {
  return tests().count(name) > 0;
}

Value apply_filter(const std::string& name, const Value& input, CallArgs& args) {
  return filters().at(name)(input, args);
}

bool apply_test(const std::string& name, const Value& subject, CallArgs& args) {
  return tests().at(name)(subject, args);
}

std::vector<std::pair<std::string, Value>> make_globals() {
  return {
      {"range", make_fn("range", g_range)},
      {"dict", make_fn("dict", g_dict)},
      {"namespace", make_fn("namespace", g_namespace)},
      {"raise_exception", make_fn("raise_exception", g_raise_exception)},
      {"strftime_now", make_fn("strftime_now", g_strftime_now)},
  };
}

}  // namespace orchid::jinja

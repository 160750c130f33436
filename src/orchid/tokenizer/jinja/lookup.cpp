// Attribute, item and slice lookup with the sandbox's rules, calls, loop objects, and the
// str/dict methods templates call (content.startswith(...), message.get(...), ...).
//
// jinja2's sandboxed getattr(obj, name) tries Python attributes first (so `d.items` is the
// dict method, never the key "items"), then obj[name]; getitem(obj, key) tries obj[key]
// first, then a string key as an attribute. Failing lookups give Undefined, except on an
// Undefined object, which raises UndefinedError.
#include <algorithm>

#include "orchid/tokenizer/jinja/builtins.h"
#include "orchid/tokenizer/jinja/pystr.h"

namespace orchid::jinja {
namespace {

Value make_callable(std::string name, std::function<Value(CallArgs&)> fn) {
  auto c = std::make_shared<Callable>();
  c->name = std::move(name);
  c->fn = std::move(fn);
  return Value::of(std::shared_ptr<const Callable>(std::move(c)));
}

Value no_attr(const Value& obj, const std::string& name) {
  return Value::undefined("'" + type_name(obj) + " object' has no attribute '" + name + "'");
}

std::optional<std::string> opt_str(const std::optional<Value>& v, const char* what) {
  if (!v || v->is_none()) return std::nullopt;
  if (!v->is_string()) type_error(std::string(what) + " must be str or None, not " + type_name(*v));
  return v->str();
}

std::string need_str(const std::optional<Value>& v, const char* fn) {
  if (!v) type_error(std::string(fn) + "() missing a required argument");
  if (!v->is_string())
    type_error(std::string(fn) + "() argument must be str, not " + type_name(*v));
  return v->str();
}

int64_t opt_int(const std::optional<Value>& v, int64_t dflt, const char* fn) {
  if (!v) return dflt;
  int64_t i = 0;
  if (!as_int(*v, i))
    type_error(std::string(fn) + "() argument must be an integer, not " + type_name(*v));
  return i;
}

Json strings(const std::vector<std::string>& parts) {
  Json a = Json::array();
  for (const auto& p : parts) a.push_back(p);
  return a;
}

bool affix_matches(const std::string& s, const Value& affix, bool prefix, const char* fn) {
  auto one = [&](const std::string& a) {
    return a.size() <= s.size() &&
           (prefix ? s.compare(0, a.size(), a) : s.compare(s.size() - a.size(), a.size(), a)) == 0;
  };
  if (affix.is_string()) return one(affix.str());
  if (affix.is_list()) {
    for (const Json& a : affix.data()) {
      if (!a.is_string()) type_error(std::string(fn) + "(): tuple items must be str");
      if (one(a.get_ref<const std::string&>())) return true;
    }
    return false;
  }
  type_error(std::string(fn) + " first arg must be str or a tuple of str, not " + type_name(affix));
}

constexpr std::string_view kStrMethods[] = {
    "capitalize", "count",        "endswith",     "find",    "join",  "lower",
    "lstrip",     "removeprefix", "removesuffix", "replace", "rfind", "rsplit",
    "rstrip",     "split",        "startswith",   "strip",   "upper"};
// Python str methods this interpreter does not implement: calling one is a clear error.
constexpr std::string_view kStrUnsupported[] = {
    "casefold",     "center",   "encode",    "expandtabs",  "format",    "format_map",
    "index",        "isalnum",  "isalpha",   "isascii",     "isdecimal", "isdigit",
    "isidentifier", "islower",  "isnumeric", "isprintable", "isspace",   "istitle",
    "isupper",      "ljust",    "partition", "rindex",      "rjust",     "rpartition",
    "splitlines",   "swapcase", "title",     "translate",   "zfill"};

template <size_t N>
bool one_of(const std::string_view (&list)[N], std::string_view name) {
  return std::find(std::begin(list), std::end(list), name) != std::end(list);
}

Value str_method(const std::string& s, const std::string& m, CallArgs& a) {
  const std::string fn = "str." + m;
  if (m == "startswith" || m == "endswith") {
    if (a.pos.size() != 1 || !a.kw.empty())
      fail(ErrorKind::unsupported, fn + "() is supported with one argument only");
    return Value::boolean(affix_matches(s, a.pos[0], m == "startswith", m.c_str()));
  }
  if (m == "strip" || m == "lstrip" || m == "rstrip") {
    auto b = bind_args(fn, a, {"chars"});
    return Value(Json(py::strip(s, opt_str(b[0], "strip arg"), m != "rstrip", m != "lstrip")));
  }
  if (m == "split" || m == "rsplit") {
    auto b = bind_args(fn, a, {"sep", "maxsplit"});
    const auto sep = opt_str(b[0], "sep");
    if (sep && sep->empty()) type_error("empty separator");
    const int64_t maxsplit = opt_int(b[1], -1, fn.c_str());
    return Value(
        strings(m == "split" ? py::split(s, sep, maxsplit) : py::rsplit(s, sep, maxsplit)));
  }
  if (m == "upper" || m == "lower" || m == "capitalize") {
    bind_args(fn, a, {});
    return Value(Json(m == "upper"   ? py::upper(s)
                      : m == "lower" ? py::lower(s)
                                     : py::capitalize(s)));
  }
  if (m == "replace") {
    auto b = bind_args(fn, a, {"old", "new", "count"});
    return Value(Json(py::replace(s, need_str(b[0], fn.c_str()), need_str(b[1], fn.c_str()),
                                  opt_int(b[2], -1, fn.c_str()))));
  }
  if (m == "find" || m == "rfind" || m == "count") {
    if (a.pos.size() != 1 || !a.kw.empty())
      fail(ErrorKind::unsupported, fn + "() is supported with one argument only");
    auto b = bind_args(fn, a, {"sub"});
    const std::string sub = need_str(b[0], fn.c_str());
    if (m == "count") {
      if (sub.empty()) return Value(Json(int64_t(py::length(s) + 1)));
      int64_t n = 0;
      for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
      return Value(Json(n));
    }
    const size_t p = m == "find" ? s.find(sub) : s.rfind(sub);
    return Value(Json(p == std::string::npos ? int64_t(-1) : int64_t(py::length(s.substr(0, p)))));
  }
  if (m == "removeprefix" || m == "removesuffix") {
    auto b = bind_args(fn, a, {"affix"});
    const std::string x = need_str(b[0], fn.c_str());
    const bool pre = m == "removeprefix";
    if (x.size() <= s.size() &&
        (pre ? s.compare(0, x.size(), x) : s.compare(s.size() - x.size(), x.size(), x)) == 0)
      return Value(Json(pre ? s.substr(x.size()) : s.substr(0, s.size() - x.size())));
    return Value(Json(s));
  }
  if (m == "join") {
    auto b = bind_args(fn, a, {"iterable"});
    if (!b[0]) type_error("str.join() takes exactly one argument");
    std::string out;
    bool first = true;
    for (const Value& item : iterate(*b[0])) {
      if (!item.is_string())
        type_error("sequence item: expected str instance, " + type_name(item) + " found");
      if (!first) out += s;
      first = false;
      out += item.str();
    }
    return Value(Json(std::move(out)));
  }
  fail(ErrorKind::unsupported, fn + "() is not supported");
}

Value dict_method(const Value& self, const std::string& m, CallArgs& a) {
  const Json& d = self.data();
  if (m == "get") {
    auto b = bind_args("dict.get", a, {"key", "default"});
    if (!b[0]) type_error("get expected at least 1 argument, got 0");
    if (b[0]->is_string()) {
      auto it = d.find(b[0]->str());
      if (it != d.end()) return self.child(*it);
    }
    return b[1] ? *b[1] : Value::none();
  }
  bind_args("dict." + m, a, {});
  Json out = Json::array();
  for (auto it = d.begin(); it != d.end(); ++it) {
    if (m == "keys")
      out.push_back(it.key());
    else if (m == "values")
      out.push_back(it.value());
    else
      out.push_back(Json::array({it.key(), it.value()}));
  }
  return Value(std::move(out));
}

constexpr std::string_view kDictMethods[] = {"get", "items", "keys", "values"};
// Present on Python dicts but refused by the ImmutableSandboxedEnvironment (or unneeded).
constexpr std::string_view kDictOther[] = {"clear",   "copy",       "fromkeys", "pop",
                                           "popitem", "setdefault", "update"};
constexpr std::string_view kListMethods[] = {"append", "clear",   "copy",   "count",
                                             "extend", "index",   "insert", "pop",
                                             "remove", "reverse", "sort"};

Value loop_attr(const Object& o, const std::string& name) {
  const size_t n = o.items->size(), i = o.index0;
  if (name == "index") return Value(Json(int64_t(i + 1)));
  if (name == "index0") return Value(Json(int64_t(i)));
  if (name == "revindex") return Value(Json(int64_t(n - i)));
  if (name == "revindex0") return Value(Json(int64_t(n - i - 1)));
  if (name == "first") return Value::boolean(i == 0);
  if (name == "last") return Value::boolean(i + 1 == n);
  if (name == "length") return Value(Json(int64_t(n)));
  if (name == "depth") return Value(Json(int64_t(1)));
  if (name == "depth0") return Value(Json(int64_t(0)));
  if (name == "previtem")
    return i > 0 ? (*o.items)[i - 1] : Value::undefined("there is no previous item");
  if (name == "nextitem")
    return i + 1 < n ? (*o.items)[i + 1] : Value::undefined("there is no next item");
  if (name == "cycle") {
    return make_callable("cycle", [i](CallArgs& a) {
      if (a.pos.empty()) type_error("no items for cycling given");
      return a.pos[i % a.pos.size()];
    });
  }
  if (name == "changed") fail(ErrorKind::unsupported, "loop.changed() is not supported");
  return Value::undefined("'LoopContext' object has no attribute '" + name + "'");
}

}  // namespace

std::vector<std::optional<Value>> bind_args(std::string_view fn, CallArgs& args,
                                            std::initializer_list<std::string_view> params) {
  std::vector<std::optional<Value>> out(params.size());
  if (args.pos.size() > params.size())
    type_error(std::string(fn) + "() takes at most " + std::to_string(params.size()) +
               " argument(s) (" + std::to_string(args.pos.size()) + " given)");
  for (size_t i = 0; i < args.pos.size(); ++i) out[i] = args.pos[i];
  for (auto& [k, v] : args.kw) {
    auto it = std::find(params.begin(), params.end(), k);
    if (it == params.end())
      type_error(std::string(fn) + "() got an unexpected keyword argument '" + k + "'");
    auto& slot = out[size_t(it - params.begin())];
    if (slot) type_error(std::string(fn) + "() got multiple values for argument '" + k + "'");
    slot = v;
  }
  return out;
}

Value get_attr(const Value& obj, const std::string& name) {
  switch (obj.kind()) {
    case Value::Kind::undefined:
      undefined_error(obj);
    case Value::Kind::callable:
      return no_attr(obj, name);
    case Value::Kind::object: {
      Object& o = *obj.object();
      if (o.type == Object::Type::loop) return loop_attr(o, name);
      if (Value* v = o.find(name)) return *v;
      return Value::undefined("'Namespace' object has no attribute '" + name + "'");
    }
    case Value::Kind::data:
      break;
  }
  if (obj.is_dict()) {
    if (one_of(kDictMethods, name))
      return make_callable("dict." + name,
                           [obj, name](CallArgs& a) { return dict_method(obj, name, a); });
    if (one_of(kDictOther, name))
      return Value::undefined("access to attribute '" + name + "' of 'dict' object is unsafe.");
    auto it = obj.data().find(name);
    if (it != obj.data().end()) return obj.child(*it);
    return no_attr(obj, name);
  }
  if (obj.is_string() && (one_of(kStrMethods, name) || one_of(kStrUnsupported, name))) {
    return make_callable("str." + name,
                         [obj, name](CallArgs& a) { return str_method(obj.str(), name, a); });
  }
  if (obj.is_list() && one_of(kListMethods, name))
    return Value::undefined("access to attribute '" + name + "' of 'list' object is unsupported.");
  return no_attr(obj, name);
}

Value get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined()) undefined_error(obj);
  if (obj.is_object()) return key.is_string() ? get_attr(obj, key.str()) : no_attr(obj, "?");
  if (!obj.is_data() || obj.is_generator())
    return Value::undefined("'" + type_name(obj) + "' object is not subscriptable");
  const Json& d = obj.data();
  if (d.is_object() && key.is_string()) {
    auto it = d.find(key.str());
    if (it != d.end()) return obj.child(*it);
  }
  int64_t i = 0;
  if ((d.is_array() || d.is_string()) && !key.is_float() && as_int(key, i)) {
    const int64_t n = d.is_array() ? int64_t(d.size()) : int64_t(py::length(obj.str()));
    if (i < 0) i += n;
    if (i < 0 || i >= n) return Value::undefined("index out of range");
    if (d.is_array()) return obj.child(d[size_t(i)]);
    const std::vector<char32_t> cps = py::code_points(obj.str());
    return Value(Json(py::from_code_points(cps, size_t(i), size_t(i) + 1)));
  }
  if (key.is_string()) return get_attr(obj, key.str());
  return Value::undefined("no item " + to_str(key) + " in " + type_name(obj));
}

Value get_slice(const Value& obj, const Value* start, const Value* stop, const Value* step) {
  if (obj.is_undefined()) undefined_error(obj);
  auto bound = [](const Value* v) -> std::optional<int64_t> {
    if (!v || v->is_none()) return std::nullopt;
    int64_t i = 0;
    if (v->is_float() || !as_int(*v, i))
      type_error("slice indices must be integers or None or have an __index__ method");
    return i;
  };
  const auto b = bound(start), e = bound(stop), s = bound(step);
  if (s && *s == 0) type_error("slice step cannot be zero");
  if (obj.is_list()) {
    const Json& d = obj.data();
    Json out = Json::array();
    for (size_t i : py::slice_indices(d.size(), b, e, s)) out.push_back(d[i]);
    return Value(std::move(out));
  }
  if (obj.is_string()) {
    const std::vector<char32_t> cps = py::code_points(obj.str());
    std::string out;
    for (size_t i : py::slice_indices(cps.size(), b, e, s)) py::append_utf8(out, cps[i]);
    return Value(Json(std::move(out)));
  }
  return Value::undefined("'" + type_name(obj) + "' object is not subscriptable");
}

Value call(const Value& fn, CallArgs& args) {
  if (fn.is_callable()) return fn.callable()->fn(args);
  if (fn.is_undefined()) undefined_error(fn);
  type_error("'" + type_name(fn) + "' object is not callable");
}

Json to_json(const Value& v) {
  if (v.is_data()) return v.data();
  if (v.is_undefined()) return Json(Json::value_t::discarded);  // read back as Undefined
  fail(ErrorKind::unsupported, "a " + type_name(v) + " cannot be stored in a list or dict");
}

Value make_loop(std::shared_ptr<const std::vector<Value>> items, size_t index0) {
  auto o = std::make_shared<Object>();
  o->type = Object::Type::loop;
  o->items = std::move(items);
  o->index0 = index0;
  return Value::of(std::move(o));
}

}  // namespace orchid::jinja

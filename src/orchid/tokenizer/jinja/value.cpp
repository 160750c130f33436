// Jinja values with Python semantics (see value.h).
#include "orchid/tokenizer/jinja/value.h"

#include <algorithm>
#include <cmath>

#include "orchid/tokenizer/jinja/pystr.h"

namespace orchid::jinja {

Value::Value(Json j) : kind_(Kind::data), owner_(std::make_shared<const Json>(std::move(j))) {
  node_ = owner_.get();
}

Value Value::undefined(std::string hint) {
  Value v;
  v.hint_ = std::move(hint);
  return v;
}

Value Value::view(std::shared_ptr<const Json> owner, const Json* node) {
  Value v;
  v.kind_ = Kind::data;
  v.owner_ = std::move(owner);
  v.node_ = node;
  return v;
}

Value Value::of(std::shared_ptr<Object> object) {
  Value v;
  v.kind_ = Kind::object;
  v.object_ = std::move(object);
  return v;
}

Value Value::of(std::shared_ptr<const Callable> callable) {
  Value v;
  v.kind_ = Kind::callable;
  v.callable_ = std::move(callable);
  return v;
}

Value Value::none() {
  static const auto kNone = std::make_shared<const Json>(nullptr);
  return view(kNone, kNone.get());
}

Value Value::boolean(bool b) {
  static const auto kTrue = std::make_shared<const Json>(true);
  static const auto kFalse = std::make_shared<const Json>(false);
  return b ? view(kTrue, kTrue.get()) : view(kFalse, kFalse.get());
}

Value Value::generator(Json list, std::string error) {
  Value v(std::move(list));
  v.generator_ = true;
  v.hint_ = std::move(error);
  return v;
}

Value* Object::find(std::string_view name) {
  for (auto& [k, v] : attrs)
    if (k == name) return &v;
  return nullptr;
}

void Object::set(const std::string& name, Value v) {
  if (Value* slot = find(name)) {
    *slot = std::move(v);
  } else {
    attrs.emplace_back(name, std::move(v));
  }
}

void undefined_error(const Value& v) {
  fail(ErrorKind::undefined, v.hint().empty() ? "value is undefined" : v.hint());
}

bool truthy(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::undefined:
      return false;
    case Value::Kind::object:
    case Value::Kind::callable:
      return true;
    case Value::Kind::data:
      break;
  }
  if (v.is_generator()) return true;
  const Json& j = v.data();
  switch (j.type()) {
    case Json::value_t::null:
      return false;
    case Json::value_t::boolean:
      return j.get<bool>();
    case Json::value_t::number_integer:
      return j.get<int64_t>() != 0;
    case Json::value_t::number_unsigned:
      return j.get<uint64_t>() != 0;
    case Json::value_t::number_float:
      return j.get<double>() != 0.0;
    case Json::value_t::string:
      return !j.get_ref<const std::string&>().empty();
    case Json::value_t::array:
    case Json::value_t::object:
      return !j.empty();
    default:
      return true;
  }
}

namespace {

// repr, ==, < and tojson recurse once per level of the data they walk.
void check_depth(int depth) {
  if (depth > kMaxDataDepth)
    fail(ErrorKind::limit, "data nested more than " + std::to_string(kMaxDataDepth) + " levels deep");
}

void append_json_repr(std::string& out, const Json& j, int depth) {
  check_depth(depth);
  switch (j.type()) {
    case Json::value_t::null:
      out += "None";
      break;
    case Json::value_t::boolean:
      out += j.get<bool>() ? "True" : "False";
      break;
    case Json::value_t::number_integer:
      out += std::to_string(j.get<int64_t>());
      break;
    case Json::value_t::number_unsigned:
      out += std::to_string(j.get<uint64_t>());
      break;
    case Json::value_t::number_float:
      out += py::float_repr(j.get<double>());
      break;
    case Json::value_t::string:
      py::append_str_repr(out, j.get_ref<const std::string&>());
      break;
    case Json::value_t::array: {
      out += '[';
      bool first = true;
      for (const Json& e : j) {
        if (!first) out += ", ";
        first = false;
        append_json_repr(out, e, depth + 1);
      }
      out += ']';
      break;
    }
    case Json::value_t::object: {
      out += '{';
      bool first = true;
      for (auto it = j.begin(); it != j.end(); ++it) {
        if (!first) out += ", ";
        first = false;
        py::append_str_repr(out, it.key());
        out += ": ";
        append_json_repr(out, it.value(), depth + 1);
      }
      out += '}';
      break;
    }
    case Json::value_t::discarded:
      out += "Undefined";
      break;
    default:
      out += "<binary>";
      break;
  }
}

void append_repr(std::string& out, const Value& v, int depth) {
  check_depth(depth);
  switch (v.kind()) {
    case Value::Kind::undefined:
      out += "Undefined";
      return;
    case Value::Kind::data:
      if (v.is_generator()) {
        out += "<generator object>";
      } else {
        append_json_repr(out, v.data(), depth);
      }
      return;
    case Value::Kind::callable:
      out += v.callable()->is_macro ? "<Macro '" + v.callable()->name + "'>"
                                    : "<built-in function " + v.callable()->name + ">";
      return;
    case Value::Kind::object:
      break;
  }
  const Object& o = *v.object();
  if (o.type == Object::Type::loop) {
    out += "<LoopContext " + std::to_string(o.index0 + 1) + "/" + std::to_string(o.items->size()) +
           ">";
    return;
  }
  out += "<Namespace {";
  bool first = true;
  for (const auto& [k, a] : o.attrs) {
    if (!first) out += ", ";
    first = false;
    py::append_str_repr(out, k);
    out += ": ";
    append_repr(out, a, depth + 1);  // a namespace may hold itself
  }
  out += "}>";
}

}  // namespace

void append_repr(std::string& out, const Value& v) {
  append_repr(out, v, 0);
}

std::string to_str(const Value& v) {
  if (v.is_undefined()) return "";
  if (v.is_string()) return v.str();
  std::string out;
  append_repr(out, v);
  return out;
}

std::string type_name(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::undefined:
      return "Undefined";
    case Value::Kind::callable:
      return v.callable()->is_macro ? "Macro" : "function";
    case Value::Kind::object:
      return v.object()->type == Object::Type::ns ? "Namespace" : "LoopContext";
    case Value::Kind::data:
      break;
  }
  if (v.is_generator()) return "generator";
  switch (v.data().type()) {
    case Json::value_t::null:
      return "NoneType";
    case Json::value_t::boolean:
      return "bool";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
      return "int";
    case Json::value_t::number_float:
      return "float";
    case Json::value_t::string:
      return "str";
    case Json::value_t::array:
      return "list";
    case Json::value_t::object:
      return "dict";
    default:
      return "object";
  }
}

bool as_int(const Value& v, int64_t& out) {
  if (!v.is_data()) return false;
  const Json& j = v.data();
  if (j.is_boolean()) {
    out = j.get<bool>();
    return true;
  }
  if (j.is_number_unsigned()) {
    const auto u = j.get<uint64_t>();
    if (u > uint64_t(INT64_MAX)) type_error("integer " + std::to_string(u) + " is too large");
    out = int64_t(u);
    return true;
  }
  if (j.is_number_integer()) {
    out = j.get<int64_t>();
    return true;
  }
  return false;
}

bool as_number(const Value& v, double& out) {
  if (!v.is_data()) return false;
  const Json& j = v.data();
  if (j.is_boolean()) {
    out = j.get<bool>();
    return true;
  }
  if (j.is_number()) {
    out = j.get<double>();
    return true;
  }
  return false;
}

namespace {

bool is_numeric(const Json& j) {
  return j.is_number() || j.is_boolean();
}

// Python's == for numbers: exact between integers, through double with a float.
bool numbers_equal(const Json& a, const Json& b) {
  if (!a.is_number_float() && !b.is_number_float()) {
    auto wide = [](const Json& j) -> __int128 {
      if (j.is_boolean()) return j.get<bool>();
      if (j.is_number_unsigned()) return __int128(j.get<uint64_t>());
      return j.get<int64_t>();
    };
    return wide(a) == wide(b);
  }
  return (a.is_boolean() ? double(a.get<bool>()) : a.get<double>()) ==
         (b.is_boolean() ? double(b.get<bool>()) : b.get<double>());
}

bool json_equal(const Json& a, const Json& b, int depth = 0) {
  check_depth(depth);
  if (is_numeric(a) && is_numeric(b)) return numbers_equal(a, b);
  if (a.type() != b.type()) return false;
  switch (a.type()) {
    case Json::value_t::null:
    case Json::value_t::discarded:  // None == None, Undefined == Undefined
      return true;
    case Json::value_t::string:
      return a.get_ref<const std::string&>() == b.get_ref<const std::string&>();
    case Json::value_t::array:
      if (a.size() != b.size()) return false;
      for (size_t i = 0; i < a.size(); ++i)
        if (!json_equal(a[i], b[i], depth + 1)) return false;
      return true;
    case Json::value_t::object:  // dict equality ignores order
      if (a.size() != b.size()) return false;
      for (auto it = a.begin(); it != a.end(); ++it) {
        auto other = b.find(it.key());
        if (other == b.end() || !json_equal(it.value(), *other, depth + 1)) return false;
      }
      return true;
    default:
      return a == b;
  }
}

}  // namespace

bool equal(const Value& a, const Value& b) {
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::undefined:
      return true;
    case Value::Kind::object:
      return a.object() == b.object();
    case Value::Kind::callable:
      return a.callable() == b.callable();
    case Value::Kind::data:
      if (a.is_generator() || b.is_generator()) return &a.data() == &b.data();  // identity
      return json_equal(a.data(), b.data());
  }
  return false;
}

namespace {

bool less(const Value& a, const Value& b, std::string_view op, int depth) {
  check_depth(depth);
  if (a.is_undefined()) undefined_error(a);
  if (b.is_undefined()) undefined_error(b);
  if (a.is_data() && b.is_data() && !a.is_generator() && !b.is_generator()) {
    const Json &x = a.data(), &y = b.data();
    if (is_numeric(x) && is_numeric(y)) {
      int64_t i = 0, k = 0;
      if (as_int(a, i) && as_int(b, k)) return i < k;
      double p = 0, q = 0;
      as_number(a, p);
      as_number(b, q);
      return p < q;
    }
    if (x.is_string() && y.is_string())
      return x.get_ref<const std::string&>() < y.get_ref<const std::string&>();
    if (x.is_array() && y.is_array()) {
      for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
        if (json_equal(x[i], y[i])) continue;
        return less(a.child(x[i]), b.child(y[i]), "<", depth + 1);
      }
      return x.size() < y.size();
    }
  }
  type_error("'" + std::string(op) + "' not supported between instances of '" + type_name(a) +
             "' and '" + type_name(b) + "'");
}

}  // namespace

bool less(const Value& a, const Value& b, std::string_view op) {
  return less(a, b, op, 0);
}

bool contains(const Value& container, const Value& item) {
  if (container.is_undefined()) return false;
  if (container.is_string()) {
    if (!item.is_string())
      type_error("'in <string>' requires string as left operand, not " + type_name(item));
    return container.str().find(item.str()) != std::string::npos;
  }
  if (container.is_generator() && !container.hint().empty()) type_error(container.hint());
  if (container.is_list() || container.is_generator()) {
    for (const Json& e : container.data())
      if (equal(container.child(e), item)) return true;
    return false;
  }
  if (container.is_dict()) {
    if (item.is_list() || item.is_dict()) type_error("unhashable type: '" + type_name(item) + "'");
    return item.is_string() && container.data().contains(item.str());
  }
  type_error("argument of type '" + type_name(container) + "' is not iterable");
}

std::vector<Value> iterate(const Value& v) {
  std::vector<Value> items;
  if (v.is_undefined()) return items;
  if (v.is_generator() && !v.hint().empty()) type_error(v.hint());
  if (v.is_list() || v.is_generator()) {
    items.reserve(v.data().size());
    for (const Json& e : v.data()) items.push_back(v.child(e));
    return items;
  }
  if (v.is_dict()) {
    for (auto it = v.data().begin(); it != v.data().end(); ++it) items.emplace_back(it.key());
    return items;
  }
  if (v.is_string()) {
    const std::string& s = v.str();
    for (size_t pos = 0; pos < s.size();) {
      const size_t start = pos;
      py::next_code_point(s, pos);
      items.emplace_back(s.substr(start, pos - start));
    }
    return items;
  }
  type_error("'" + type_name(v) + "' object is not iterable");
}

size_t length(const Value& v) {
  if (v.is_undefined()) return 0;
  if (v.is_string()) return py::length(v.str());
  if (v.is_list() || v.is_dict()) return v.data().size();
  type_error("object of type '" + type_name(v) + "' has no len()");
}

namespace {

void dump(std::string& out, const Json& j, const DumpOptions& o, int level) {
  check_depth(level);
  switch (j.type()) {
    case Json::value_t::null:
      out += "null";
      return;
    case Json::value_t::boolean:
      out += j.get<bool>() ? "true" : "false";
      return;
    case Json::value_t::number_integer:
      out += std::to_string(j.get<int64_t>());
      return;
    case Json::value_t::number_unsigned:
      out += std::to_string(j.get<uint64_t>());
      return;
    case Json::value_t::number_float: {
      const double d = j.get<double>();
      out += std::isnan(d)   ? "NaN"
             : std::isinf(d) ? (d < 0 ? "-Infinity" : "Infinity")
                             : py::float_repr(d);
      return;
    }
    case Json::value_t::string:
      py::append_json_string(out, j.get_ref<const std::string&>(), o.ensure_ascii);
      return;
    case Json::value_t::array:
    case Json::value_t::object:
      break;
    case Json::value_t::discarded:
      type_error("Object of type Undefined is not JSON serializable");
    default:
      type_error("Object of type bytes is not JSON serializable");
  }
  const bool is_array = j.is_array();
  if (j.empty()) {
    out += is_array ? "[]" : "{}";
    return;
  }
  std::string newline_indent;
  if (o.indent) {
    newline_indent = "\n";
    for (int i = 0; i <= level; ++i) newline_indent += *o.indent;
  }
  out += is_array ? '[' : '{';
  out += newline_indent;
  const std::string sep = o.item_sep + newline_indent;
  if (is_array) {
    bool first = true;
    for (const Json& e : j) {
      if (!first) out += sep;
      first = false;
      dump(out, e, o, level + 1);
    }
  } else {
    std::vector<Json::const_iterator> members;
    for (auto it = j.begin(); it != j.end(); ++it) members.push_back(it);
    if (o.sort_keys)
      std::stable_sort(members.begin(), members.end(),
                       [](const auto& a, const auto& b) { return a.key() < b.key(); });
    bool first = true;
    for (const auto& it : members) {
      if (!first) out += sep;
      first = false;
      py::append_json_string(out, it.key(), o.ensure_ascii);
      out += o.key_sep;
      dump(out, it.value(), o, level + 1);
    }
  }
  if (o.indent) {
    out += '\n';
    for (int i = 0; i < level; ++i) out += *o.indent;
  }
  out += is_array ? ']' : '}';
}

}  // namespace

std::string dumps(const Json& j, const DumpOptions& opts) {
  std::string out;
  dump(out, j, opts, 0);
  return out;
}

}  // namespace orchid::jinja

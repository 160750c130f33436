// Values of the Jinja interpreter and their Python semantics (truthiness, str(), ==, <, in,
// len, iteration, json.dumps). Data is nlohmann::ordered_json (insertion-ordered like Python
// dicts), shared and immutable: a Value views a node inside a reference-counted JSON tree, so
// `messages[3].content` copies nothing. Besides data a Value is jinja2's Undefined, a
// namespace()/loop object, or a callable (macro, global function, bound str/dict method).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "orchid/tokenizer/jinja/error.h"

namespace orchid::jinja {

using Json = nlohmann::ordered_json;
class Value;
struct Object;
struct Callable;

// The arguments of a call, positional then keyword, as Python passes them.
struct CallArgs {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
};

class Value {
 public:
  enum class Kind : uint8_t { undefined, data, object, callable };

  Value() = default;  // Undefined without a name
  Value(Json j);      // NOLINT: implicit on purpose; owns j
  static Value undefined(std::string hint);
  // A view of `node`, which lives inside the tree that `owner` keeps alive.
  static Value view(std::shared_ptr<const Json> owner, const Json* node);
  static Value of(std::shared_ptr<Object> object);
  static Value of(std::shared_ptr<const Callable> callable);
  static Value none();
  static Value boolean(bool b);
  // The lazy result of select/map/items/reverse...: a list that, like a Python generator, is
  // always true, has no len() and cannot be indexed or serialised.
  // `error`: iterating it raises TypeError(error) (a generator that fails when consumed).
  static Value generator(Json list, std::string error = {});

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::undefined; }
  bool is_data() const { return kind_ == Kind::data; }
  bool is_object() const { return kind_ == Kind::object; }
  bool is_callable() const { return kind_ == Kind::callable; }
  bool is_string() const { return is_data() && node_->is_string(); }
  bool is_none() const { return is_data() && node_->is_null(); }
  bool is_bool() const { return is_data() && node_->is_boolean(); }
  bool is_list() const { return is_data() && node_->is_array() && !generator_; }
  bool is_generator() const { return generator_; }
  bool is_dict() const { return is_data() && node_->is_object(); }
  // int or float, not bool (Jinja's `is integer` / `is float` distinction).
  bool is_int() const { return is_data() && node_->is_number_integer(); }
  bool is_float() const { return is_data() && node_->is_number_float(); }

  // PRECONDITION: is_data().
  const Json& data() const { return *node_; }
  // PRECONDITION: is_string().
  const std::string& str() const { return node_->get_ref<const std::string&>(); }
  // A view of a node inside data() (an element or member), sharing the owner. A discarded
  // node is how an Undefined is stored inside a list or dict.
  Value child(const Json& node) const {
    return node.is_discarded() ? Value() : view(owner_, &node);
  }
  Object* object() const { return object_.get(); }
  const std::shared_ptr<Object>& object_ptr() const { return object_; }
  const Callable* callable() const { return callable_.get(); }
  // For an undefined value: what UndefinedError says when it is used; for a generator, the
  // TypeError iterating it raises (empty: none).
  const std::string& hint() const { return hint_; }

 private:
  Kind kind_ = Kind::undefined;
  const Json* node_ = nullptr;
  std::shared_ptr<const Json> owner_;
  std::shared_ptr<Object> object_;
  std::shared_ptr<const Callable> callable_;
  std::string hint_;
  bool generator_ = false;
};

// A macro, a global function or a bound method.
struct Callable {
  std::string name;
  bool is_macro = false;
  std::function<Value(CallArgs&)> fn;
};

// namespace() objects (attributes assignable with `set ns.x = ...`) and loop objects.
struct Object {
  enum class Type { ns, loop };
  Type type = Type::ns;
  std::vector<std::pair<std::string, Value>> attrs;  // ns: its attributes in insertion order
  // loop: the items iterated, the current position and the nesting depth.
  std::shared_ptr<const std::vector<Value>> items;
  size_t index0 = 0;
  int depth0 = 0;

  Value* find(std::string_view name);
  void set(const std::string& name, Value v);
};

[[noreturn]] void undefined_error(const Value& v);

bool truthy(const Value& v);
std::string to_str(const Value& v);                  // str(v); Undefined prints as ''
void append_repr(std::string& out, const Value& v);  // repr(v)
std::string type_name(const Value& v);               // Python's type name, for error messages
bool equal(const Value& a, const Value& b);
// a < b; `op` names the operator in the TypeError for unorderable operands.
bool less(const Value& a, const Value& b, std::string_view op);
bool contains(const Value& container, const Value& item);  // `item in container`
std::vector<Value> iterate(const Value& v);                // what `for x in v` visits
size_t length(const Value& v);                             // len(v)

// Python int semantics: bool counts as 0/1. False when v is not an int or bool.
bool as_int(const Value& v, int64_t& out);
// Any number or bool as double. False otherwise.
bool as_number(const Value& v, double& out);

// Data nested deeper fails with ErrorKind::limit in repr, ==, <, `in` and tojson (each
// recurses per level). Client JSON is refused past kMaxJsonDepth (128) before it gets here;
// this bounds what a template builds itself (e.g. a list appended into itself in a loop).
inline constexpr int kMaxDataDepth = 512;

// json.dumps(x, ensure_ascii, indent, separators, sort_keys).
struct DumpOptions {
  std::optional<std::string> indent;  // the indent string; nullopt: single line
  std::string item_sep = ", ";
  std::string key_sep = ": ";
  bool sort_keys = false;
  bool ensure_ascii = false;
};
std::string dumps(const Json& j, const DumpOptions& opts);

}  // namespace orchid::jinja

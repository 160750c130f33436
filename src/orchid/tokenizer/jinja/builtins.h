// What a template can reach besides its own variables: Jinja2's built-in filters and tests
// (with transformers' tojson), the globals (range, dict, namespace, raise_exception,
// strftime_now), the str/dict methods, and attribute/item lookup with the rules of the
// ImmutableSandboxedEnvironment's getattr/getitem.
#pragma once

#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "orchid/tokenizer/jinja/value.h"

namespace orchid::jinja {

bool has_filter(std::string_view name);
bool has_test(std::string_view name);
// PRECONDITION: has_filter(name) / has_test(name) (the parser checks).
Value apply_filter(const std::string& name, const Value& input, CallArgs& args);
bool apply_test(const std::string& name, const Value& subject, CallArgs& args);

Value get_attr(const Value& obj, const std::string& name);  // obj.name
Value get_item(const Value& obj, const Value& key);         // obj[key]
// obj[start:stop:step]; null bounds are omitted ones.
Value get_slice(const Value& obj, const Value* start, const Value* stop, const Value* step);
Value call(const Value& fn, CallArgs& args);  // fn(args)

// The JSON stored for v in a list/dict literal or a filter result. An Undefined is stored as
// a discarded node (read back as Undefined); namespaces and callables cannot be stored (Python
// could hold them; templates do not need it).
Json to_json(const Value& v);

std::vector<std::pair<std::string, Value>> make_globals();

// A loop object for item `index0` of `items`.
Value make_loop(std::shared_ptr<const std::vector<Value>> items, size_t index0);

// Binds call arguments to parameter names as Python does (positional first, then keywords);
// a parameter that was not given stays nullopt. TypeError on extra or unknown arguments.
std::vector<std::optional<Value>> bind_args(std::string_view fn, CallArgs& args,
                                            std::initializer_list<std::string_view> params);

}  // namespace orchid::jinja

// The field readers of json_fields.h.
#include "orchid/server/json_fields.h"

#include <cmath>

#include "orchid/util/json_depth.h"

namespace orchid::server {

const char* type_name(const OJson& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "an array";
  return "an object";
}

ApiError wrong_type(const std::string& param, const char* expected, const OJson& got) {
  return bad_request("'" + param + "' must be " + expected + ", not " + type_name(got), param);
}

ApiError too_deep(const std::string& param) {
  return bad_request((param.empty() ? std::string("the body") : "'" + param + "'") +
                         " nests arrays and objects more than " + std::to_string(kMaxJsonDepth) +
                         " levels deep",
                     param);
}

const OJson* field(const OJson& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

Err get_bool(const OJson& obj, const char* key, std::optional<bool>& out) {
  const OJson* v = field(obj, key);
  if (!v) return {};
  if (!v->is_boolean()) return wrong_type(key, "a boolean", *v);
  out = v->get<bool>();
  return {};
}

Err get_int(const OJson& obj, const std::string& key, std::optional<int64_t>& out, int64_t lo,
            int64_t hi) {
  const OJson* v = field(obj, key.c_str());
  if (!v) return {};
  auto range = [&] {
    return bad_request(
        "'" + key + "' must be an integer from " + std::to_string(lo) + " to " + std::to_string(hi),
        key);
  };
  if (v->is_number_unsigned()) {
    const uint64_t u = v->get<uint64_t>();
    if (u > uint64_t(hi)) return range();
    out = int64_t(u);
  } else if (v->is_number_integer()) {
    out = v->get<int64_t>();
  } else if (v->is_number_float()) {
    const double d = v->get<double>();
    if (!std::isfinite(d) || d != std::floor(d)) return wrong_type(key, "an integer", *v);
    if (d < double(lo) || d > double(hi)) return range();
    out = int64_t(d);
  } else {
    return wrong_type(key, "an integer", *v);
  }
  if (*out < lo || *out > hi) return range();
  return {};
}

Err get_float(const OJson& obj, const char* key, std::optional<float>& out, double lo, double hi,
              bool lo_open) {
  const OJson* v = field(obj, key);
  if (!v) return {};
  if (!v->is_number()) return wrong_type(key, "a number", *v);
  const double d = v->get<double>();
  if (!std::isfinite(d) || d < lo || d > hi || (lo_open && d == lo))
    return bad_request("'" + std::string(key) + "' must be a number " +
                           (lo_open ? "above " : "from ") + nlohmann::json(lo).dump() + " to " +
                           nlohmann::json(hi).dump() + ", not " + v->dump(),
                       key);
  out = float(d);
  return {};
}

std::string at(const std::string& param, size_t k) {
  return param + "[" + std::to_string(k) + "]";
}

ApiError need_string(const std::string& param) {
  return bad_request("'" + param + "' must be a string", param);
}

ApiExpected<OJson> function_tool(const OJson& t, const std::string& p, const char* schema_key,
                                 bool schema_required) {
  const OJson* name = field(t, "name");
  if (!name || !name->is_string() || name->get<std::string>().empty())
    return bad_request("'" + p + ".name' must be a non-empty string", p + ".name");
  OJson fn = {{"name", *name}};
  if (const OJson* d = field(t, "description")) {
    if (!d->is_string()) return wrong_type(p + ".description", "a string", *d);
    fn["description"] = *d;
  }
  const std::string sp = p + "." + schema_key;
  if (const OJson* schema = field(t, schema_key)) {
    if (!schema->is_object()) return wrong_type(sp, "an object", *schema);
    fn["parameters"] = *schema;
  } else if (schema_required) {
    return bad_request("'" + sp + "' must be an object", sp);
  }
  return OJson{{"type", "function"}, {"function", std::move(fn)}};
}

}  // namespace orchid::server

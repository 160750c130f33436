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

}  // namespace orchid::server

// Reading fields of a client's JSON body with the 400s that name them: shared by the request
// parsers of every API (openai_request.cpp, anthropic_request.cpp).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "orchid/server/api_error.h"

namespace orchid::server {

using OJson = nlohmann::ordered_json;
// A check's outcome: nothing, or the error to answer with.
using Err = std::optional<ApiError>;

// Returns the error of a check that failed.
#define API_TRY(expr)                             \
  do {                                            \
    if (auto api_err_ = (expr)) return *api_err_; \
  } while (0)

// "a string", "an object", ... for messages.
const char* type_name(const OJson& v);
// 400: 'param' must be `expected`, not <what it is>.
ApiError wrong_type(const std::string& param, const char* expected, const OJson& got);
// JSON nested past kMaxJsonDepth: refused before it is parsed (`param` "" for the whole body).
ApiError too_deep(const std::string& param);
// "param[k]": the name of an array element, for messages.
std::string at(const std::string& param, size_t k);
// 400: 'param' must be a string.
ApiError need_string(const std::string& param);
// A flat tool {name, description?, <schema_key>: object} (Anthropic: input_schema, required;
// Responses: parameters, optional) as the chat path's {"type": "function", "function": {...}};
// `p` names it in errors.
ApiExpected<OJson> function_tool(const OJson& tool, const std::string& p, const char* schema_key,
                                 bool schema_required);
// The value of `key`, or nullptr when absent or null (both mean "not given").
const OJson* field(const OJson& obj, const char* key);
Err get_bool(const OJson& obj, const char* key, std::optional<bool>& out);
// An integer in [lo, hi]; integral floats (3.0) are accepted, 1.5 is not.
Err get_int(const OJson& obj, const std::string& key, std::optional<int64_t>& out, int64_t lo,
            int64_t hi);
// A finite number in [lo, hi] ((lo, hi] when lo_open).
Err get_float(const OJson& obj, const char* key, std::optional<float>& out, double lo, double hi,
              bool lo_open = false);

}  // namespace orchid::server

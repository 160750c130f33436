// Qwen XML tool-call body parsing and schema-typed JSON arguments (see tool_args.h).
#include "orchid/tokenizer/tool_args.h"

#include <cstdint>

#include "orchid/util/json_depth.h"

namespace orchid {

namespace {

constexpr std::string_view kWs = " \t\r\n";
constexpr std::string_view kFunctionOpen = "<function=";
constexpr std::string_view kFunctionClose = "</function>";
constexpr std::string_view kParamOpen = "<parameter=";
constexpr std::string_view kParamClose = "</parameter>";

size_t skip_ws(std::string_view s, size_t pos) {
  size_t p = s.find_first_not_of(kWs, pos);
  return p == std::string_view::npos ? s.size() : p;
}

std::string_view trim(std::string_view s, std::string_view chars) {
  size_t b = s.find_first_not_of(chars);
  if (b == std::string_view::npos) return {};
  size_t e = s.find_last_not_of(chars);
  return s.substr(b, e - b + 1);
}

// Reads NAME of "<tag=NAME>" starting just after '='; advances pos past '>'.
Expected<std::string> read_tag_name(std::string_view body, size_t& pos, std::string_view what) {
  size_t gt = body.find('>', pos);
  if (gt == std::string_view::npos) return err(what, " tag has no closing '>'");
  std::string_view name = trim(body.substr(pos, gt - pos), " \t");
  if (name.empty()) return err(what, " name is empty");
  if (name.find_first_of("<\r\n") != std::string_view::npos)
    return err(what, " name '", name, "' contains '<' or a newline");
  pos = gt + 1;
  return std::string(name);
}

// Permitted JSON types of a schema, as a bit set.
enum TypeBit : uint32_t {
  kString = 1,
  kInteger = 2,
  kNumber = 4,
  kBoolean = 8,
  kObject = 16,
  kArray = 32,
  kNull = 64,
  kAny = 127,
};

uint32_t type_bit(const nlohmann::json& name) {
  if (!name.is_string()) return kAny;
  const std::string& t = name.get_ref<const std::string&>();
  if (t == "string") return kString;
  if (t == "integer") return kInteger;
  if (t == "number") return kNumber;
  if (t == "boolean") return kBoolean;
  if (t == "object") return kObject;
  if (t == "array") return kArray;
  if (t == "null") return kNull;
  return kAny;  // unknown type name: do not constrain
}

uint32_t permitted_types(const nlohmann::json& schema, int depth = 0) {
  if (!schema.is_object() || depth > 8) return kAny;
  if (auto it = schema.find("type"); it != schema.end()) {
    if (it->is_array()) {
      uint32_t bits = 0;
      for (const auto& t : *it) bits |= type_bit(t);
      return bits ? bits : kAny;
    }
    return type_bit(*it);
  }
  for (const char* key : {"anyOf", "oneOf"}) {
    auto it = schema.find(key);
    if (it == schema.end() || !it->is_array() || it->empty()) continue;
    uint32_t bits = 0;
    for (const auto& alt : *it) bits |= permitted_types(alt, depth + 1);
    return bits;
  }
  return kAny;
}

uint32_t json_type_bit(const nlohmann::ordered_json& v) {
  switch (v.type()) {
    case nlohmann::ordered_json::value_t::null:
      return kNull;
    case nlohmann::ordered_json::value_t::boolean:
      return kBoolean;
    case nlohmann::ordered_json::value_t::number_integer:
    case nlohmann::ordered_json::value_t::number_unsigned:
      return kInteger | kNumber;
    case nlohmann::ordered_json::value_t::number_float:
      return kNumber;
    case nlohmann::ordered_json::value_t::object:
      return kObject;
    case nlohmann::ordered_json::value_t::array:
      return kArray;
    default:
      return kString;
  }
}

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    char x = a[i] >= 'A' && a[i] <= 'Z' ? char(a[i] - 'A' + 'a') : a[i];
    if (x != b[i]) return false;
  }
  return true;
}

}  // namespace

Expected<XmlToolCall> parse_tool_call_xml(std::string_view body) {
  XmlToolCall call;
  size_t pos = skip_ws(body, 0);
  if (body.substr(pos, kFunctionOpen.size()) != kFunctionOpen)
    return err("tool call does not start with ", kFunctionOpen);
  pos += kFunctionOpen.size();
  auto name = read_tag_name(body, pos, "function");
  if (!name) return name.error();
  call.name = std::move(*name);
  while (true) {
    pos = skip_ws(body, pos);
    if (pos == body.size()) break;  // no </function>: tolerated
    std::string_view rest = body.substr(pos);
    if (rest.starts_with(kParamOpen)) {
      pos += kParamOpen.size();
      auto pname = read_tag_name(body, pos, "parameter");
      if (!pname) return pname.error();
      size_t close = body.find(kParamClose, pos);
      if (close == std::string_view::npos) return err("parameter '", *pname, "' is not closed");
      std::string_view value = body.substr(pos, close - pos);
      if (value.starts_with('\n')) value.remove_prefix(1);
      if (value.ends_with('\n')) value.remove_suffix(1);
      call.params.emplace_back(std::move(*pname), std::string(value));
      pos = close + kParamClose.size();
    } else if (rest.starts_with(kFunctionClose)) {
      pos = skip_ws(body, pos + kFunctionClose.size());
      if (pos != body.size()) return err("text after ", kFunctionClose);
      break;
    } else {
      return err("unexpected text in function '", call.name, "' at offset ", pos);
    }
  }
  return call;
}

const nlohmann::json* find_param_schema(const nlohmann::json& tools, std::string_view function,
                                        std::string_view param) {
  if (!tools.is_array()) return nullptr;
  for (const auto& tool : tools) {
    if (!tool.is_object()) continue;
    auto fn = tool.find("function");
    if (fn == tool.end() || !fn->is_object()) continue;
    auto name = fn->find("name");
    if (name == fn->end() || !name->is_string() || name->get_ref<const std::string&>() != function)
      continue;
    auto params = fn->find("parameters");
    if (params == fn->end() || !params->is_object()) return nullptr;
    auto props = params->find("properties");
    if (props == params->end() || !props->is_object()) return nullptr;
    auto it = props->find(std::string(param));
    return it == props->end() ? nullptr : &*it;
  }
  return nullptr;
}

nlohmann::ordered_json type_param_value(const std::string& raw, const nlohmann::json* schema) {
  if (schema == nullptr) return raw;
  uint32_t permitted = permitted_types(*schema);
  if (permitted == kString) return raw;
  std::string_view trimmed = trim(raw, kWs);
  if (permitted & kBoolean) {
    if (iequals(trimmed, "true")) return true;
    if (iequals(trimmed, "false")) return false;
  }
  // Model output nested past the limit stays text: the answer's dump recurses per level.
  if (json_too_deep(raw)) return raw;
  auto parsed = nlohmann::ordered_json::parse(raw, nullptr, /*allow_exceptions=*/false);
  if (!parsed.is_discarded() && !parsed.is_string()) {
    if ((json_type_bit(parsed) & (permitted | kNull)) != 0) return parsed;
  }
  return raw;
}

std::string tool_arguments_json(const XmlToolCall& call, const nlohmann::json& tools) {
  nlohmann::ordered_json args = nlohmann::ordered_json::object();
  for (const auto& [name, value] : call.params)
    args[name] = type_param_value(value, find_param_schema(tools, call.name, name));
  return args.dump(-1, ' ', /*ensure_ascii=*/false,
                   nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace orchid

// Parsing of safetensors dtype strings (the inverse of dtype_name).
#include "orchid/model/dtype.h"

namespace orchid {

std::optional<DType> parse_dtype(std::string_view name) {
  for (DType t : kAllDTypes) {
    if (dtype_name(t) == name) return t;
  }
  return std::nullopt;
}

}  // namespace orchid

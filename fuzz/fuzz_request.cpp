// libFuzzer target: a request body for any endpoint through validation and, for the chat and
// template endpoints, the built-in template (request_input.h): never a crash, a throw or a
// stack overflow. Seeds live in fuzz/corpus/request/ (run: fuzz_request fuzz/corpus/request).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "request_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  if (orchid::fuzz::exercise_request(input) == orchid::fuzz::Outcome::broken) __builtin_trap();
  return 0;
}

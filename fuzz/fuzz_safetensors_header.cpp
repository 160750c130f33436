// libFuzzer target: parse_safetensors must never crash, throw, or read outside its input.
// Seeds live in fuzz/corpus/safetensors/ (run: fuzz_safetensors_header fuzz/corpus/safetensors).
#include <cstddef>
#include <cstdint>
#include <span>

#include "orchid/model/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const uint8_t> bytes(data, size);
  std::map<std::string, std::string> metadata;
  auto result = orchid::parse_safetensors(bytes, "fuzz.safetensors", &metadata);
  if (!result.ok()) return 0;
  // Every accepted tensor must lie inside the input and match its shape x dtype; touching
  // the first and last byte lets ASan flag a bad span even if the check were wrong.
  volatile uint8_t sink = 0;
  for (const orchid::TensorInfo& t : *result) {
    const uint8_t* begin = t.data.data();
    if (t.data.empty()) continue;
    if (begin < data || begin + t.data.size() > data + size) __builtin_trap();
    if (t.data.size() != static_cast<size_t>(t.numel()) * orchid::dtype_size(t.dtype)) {
      __builtin_trap();
    }
    sink = sink + t.data.front() + t.data.back();
  }
  (void)sink;
  return 0;
}

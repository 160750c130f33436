// libFuzzer target: parse_gguf must never crash, throw, or read outside its input.
// Seeds live in fuzz/corpus/gguf/ (run: fuzz_gguf fuzz/corpus/gguf).
#include <cstddef>
#include <cstdint>
#include <span>

#include "orchid/model/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto f = orchid::parse_gguf(std::span<const uint8_t>(data, size), "fuzz.gguf");
  if (!f.ok()) return 0;
  // Every accepted tensor lies inside the input with its declared size; touching its first and
  // last byte lets ASan flag a bad span even if the check were wrong.
  volatile uint8_t sink = 0;
  for (const orchid::GgufTensor& t : f->tensors) {
    if (t.data.size() != t.nbytes || t.data.empty()) __builtin_trap();
    if (t.data.data() < data || t.data.data() + t.data.size() > data + size) __builtin_trap();
    sink = sink + t.data.front() + t.data.back();
  }
  (void)sink;
  return 0;
}

// Which SIMD path the CPU backend's fast kernels take, picked once at start-up from CPUID (and
// the OS's saved-state support, XCR0), lowered on request by ORCHID_CPU_ISA for tests and
// ablations.
#pragma once

#include <string_view>

#include "orchid/util/status.h"

namespace orchid::cpu {

// Ordered: each path needs what the ones before it need.
enum class CpuIsa {
  scalar,       // portable C++ (the integer reference of the fast kernels)
  avx2,         // AVX2 + FMA: u8 x s8 pairs (vpmaddubsw) summed to int32
  avx512_vnni,  // AVX-512 F/BW/VL/DQ + VNNI: vpdpbusd, 64 u8 x s8 products per instruction
  amx,          // avx512_vnni plus AMX-INT8/BF16 tiles (detected and reported; the kernels
                // run the avx512_vnni path)
};

std::string_view isa_name(CpuIsa isa);

// What this CPU and OS support (cached after the first call).
CpuIsa detected_isa();

// The path the kernels take: detected_isa(), or ORCHID_CPU_ISA (scalar | avx2 | avx512_vnni)
// when set to one this CPU supports; a value it does not support or does not know is an error.
Expected<CpuIsa> isa_from_env();

// One line for `orchid info` and bench JSON, e.g. "avx512_vnni (detected: amx)".
std::string isa_summary(CpuIsa active);

}  // namespace orchid::cpu

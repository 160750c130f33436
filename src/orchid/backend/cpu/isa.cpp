// CPUID leaves 1 and 7 for the instruction sets, XGETBV for the register state the OS saves
// (AVX-512 needs opmask + ZMM state, AMX the tile state), as the Intel SDM prescribes.
#include "orchid/backend/cpu/isa.h"

#include <cstdlib>
#include <string>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace orchid::cpu {
namespace {

#if defined(__x86_64__)
uint64_t xcr0() {
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (uint64_t(hi) << 32) | lo;
}

CpuIsa detect() {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return CpuIsa::scalar;
  const bool osxsave = c & (1u << 27), fma = c & (1u << 12);
  if (!osxsave) return CpuIsa::scalar;
  const uint64_t x = xcr0();
  if ((x & 0x6) != 0x6) return CpuIsa::scalar;  // XMM + YMM state
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return CpuIsa::scalar;
  const bool avx2 = b & (1u << 5);
  if (!avx2 || !fma) return CpuIsa::scalar;
  const bool f = b & (1u << 16), dq = b & (1u << 17), bw = b & (1u << 30), vl = b & (1u << 31);
  const bool vnni = c & (1u << 11);
  const bool zmm_state = (x & 0xE0) == 0xE0;  // opmask, ZMM0-15 upper halves, ZMM16-31
  if (!(f && dq && bw && vl && vnni && zmm_state)) return CpuIsa::avx2;
  const bool amx_tile = d & (1u << 24), amx_int8 = d & (1u << 25);
  const bool tile_state = (x & (3ull << 17)) == (3ull << 17);  // XTILECFG + XTILEDATA
  return amx_tile && amx_int8 && tile_state ? CpuIsa::amx : CpuIsa::avx512_vnni;
}
#else
CpuIsa detect() {
  return CpuIsa::scalar;
}
#endif

}  // namespace

std::string_view isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::scalar:
      return "scalar";
    case CpuIsa::avx2:
      return "avx2";
    case CpuIsa::avx512_vnni:
      return "avx512_vnni";
    case CpuIsa::amx:
      return "amx";
  }
  return "?";
}

CpuIsa detected_isa() {
  static const CpuIsa isa = detect();
  return isa;
}

Expected<CpuIsa> isa_from_env() {
  const CpuIsa have = detected_isa();
  const char* v = std::getenv("ORCHID_CPU_ISA");
  if (!v || !*v) return have;
  for (CpuIsa isa : {CpuIsa::scalar, CpuIsa::avx2, CpuIsa::avx512_vnni, CpuIsa::amx}) {
    if (isa_name(isa) != v) continue;
    if (int(isa) > int(have))
      return err("ORCHID_CPU_ISA=", v, ": this CPU supports up to ", isa_name(have));
    return isa;
  }
  return err("ORCHID_CPU_ISA: expected scalar, avx2, avx512_vnni or amx, got '", v, "'");
}

std::string isa_summary(CpuIsa active) {
  std::string s(isa_name(active));
  if (active != detected_isa()) s += " (detected: " + std::string(isa_name(detected_isa())) + ")";
  return s;
}

}  // namespace orchid::cpu

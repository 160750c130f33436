// float8 e4m3 (the "fn" variant: no infinities, 0x7f / 0xff are NaN, largest finite 448), as
// Qwen's and DeepSeek's FP8 checkpoints store weights (safetensors F8_E4M3). Host side.
#pragma once

#include <cstdint>

namespace orchid {

// The value of an e4m3 byte: sign, 4-bit exponent (bias 7), 3-bit mantissa; exponent 0 is
// subnormal (m / 8 · 2⁻⁶). Exact in float.
float fp8_e4m3_to_f32(uint8_t code);

// The e4m3 byte nearest to f, ties to the even code (round to nearest even, as a hardware cast);
// beyond ±448 saturates to ±448 (the checkpoint writers clamp before casting); NaN → 0x7f.
uint8_t f32_to_fp8_e4m3(float f);

}  // namespace orchid

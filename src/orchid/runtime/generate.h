// The plain generation loop: prefill a prompt, then decode one token at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "orchid/backend/backend.h"
#include "orchid/runtime/sampler.h"

namespace orchid {

// Generates up to n tokens after `prompt` in a fresh state. on_token (optional) sees each id
// as it is chosen and may return false to stop early.
Expected<std::vector<int32_t>> generate(Backend& backend, std::span<const int32_t> prompt, int n,
                                        const SamplerParams& sampler,
                                        const std::function<bool(int32_t)>& on_token = {});

}  // namespace orchid

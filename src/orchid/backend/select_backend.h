// Picks the compute backend for a loaded model: "cpu", "cuda", or "auto" (cuda when this
// build has it and a usable GPU is present, else cpu).
#pragma once

#include <memory>
#include <string>

#include "orchid/backend/backend.h"
#include "orchid/backend/cpu/cpu_backend.h"
#include "orchid/model/model.h"

namespace orchid {

// `note` receives a one-line remark for the user (the device chosen and path taken, or why cuda
// was not). The cpu backend takes its options from the environment (cpu_options_from_env); a
// bad value there is an error whichever backend is picked. `exact` (the CLI's --exact): the cpu
// backend's exact path whatever the environment says.
Expected<std::unique_ptr<Backend>> make_backend(const std::string& name, const Model& model,
                                                std::string* note, bool exact = false);

// The cpu backend's options as make_backend picks them, and a few words on its path
// ("fast path on avx512_vnni", "exact fp32 path") for logs and bench JSON.
Expected<CpuOptions> cpu_options(bool exact);
std::string cpu_path_summary(const CpuOptions& o);

}  // namespace orchid

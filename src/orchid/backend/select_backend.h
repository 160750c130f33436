// Picks the compute backend for a loaded model: "cpu", "cuda", or "auto" (cuda when this
// build has it and a usable GPU is present, else cpu).
#pragma once

#include <memory>
#include <string>

#include "orchid/backend/backend.h"
#include "orchid/model/model.h"

namespace orchid {

// `note` receives a one-line remark for the user (the device chosen, or why cuda was not). The
// cpu backend takes its options from the environment (cpu_options_from_env); a bad value there
// is an error whichever backend is picked.
Expected<std::unique_ptr<Backend>> make_backend(const std::string& name, const Model& model,
                                                std::string* note);

}  // namespace orchid

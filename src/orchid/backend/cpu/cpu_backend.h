// The CPU backend: the reference forward pass (fp32 activations, weights as stored),
// multi-threaded, prefill in bounded chunks, tiled attention, persistent decode state.
#pragma once

#include <memory>

#include "orchid/backend/backend.h"
#include "orchid/model/model.h"

namespace orchid {

// PRECONDITION: `model` outlives the backend.
std::unique_ptr<Backend> make_cpu_backend(const Model& model);

}  // namespace orchid

// What bounds the CPU backend, measured on this machine: the memory read bandwidth all threads
// reach, and the weight bytes one decode step reads — so `orchid bench` reports decode as GB/s
// and as a fraction of the machine's bandwidth (issue 35's bar).
#pragma once

#include <cstdint>

#include "orchid/model/model.h"

namespace orchid {

// Best of three reads of a 1 GiB buffer split over the thread pool, GB/s (1e9 bytes).
double measure_read_bandwidth_gbs();

// Bytes of weights one decode token reads: every matrix but the experts, plus n_expert_used
// routed experts per layer (their average size) and the shared expert; the embedding row only.
int64_t decode_weight_bytes(const Model& m);

}  // namespace orchid

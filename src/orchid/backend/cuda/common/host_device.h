// ORCHID_HOST_DEVICE: functions the kernels and the CPU tests share (layout and index arithmetic)
// are __host__ __device__ under nvcc and plain functions in host-only translation units.
#pragma once

#ifdef __CUDACC__
#define ORCHID_HOST_DEVICE __host__ __device__
#else
#define ORCHID_HOST_DEVICE
#endif

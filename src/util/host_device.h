// MOESERVE_HOST_DEVICE marks a function that the host and the GPU share (one definition for both, so that the
// CUDA runner computes exactly what the CPU reference does); headers that use it compile as C++17 under nvcc.
#pragma once

#if defined(__CUDACC__)
#define MOESERVE_HOST_DEVICE __host__ __device__
#else
#define MOESERVE_HOST_DEVICE
#endif

// MOESERVE_HD marks the plain functions that both the kernels and the host (CPU tests, fuzz targets) run:
// __host__ __device__ under nvcc, inline elsewhere.
#pragma once

#if defined(__CUDACC__)
#define MOESERVE_HD __host__ __device__ __forceinline__
#else
#define MOESERVE_HD inline
#endif

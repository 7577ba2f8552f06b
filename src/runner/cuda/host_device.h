// MOESERVE_HD: a function both the host and the device call (index algebra shared by kernels and their CPU tests);
// plain inline where no CUDA compiler reads the header.
#pragma once

#if defined(__CUDACC__)
#define MOESERVE_HD __host__ __device__ __forceinline__
#else
#define MOESERVE_HD inline
#endif

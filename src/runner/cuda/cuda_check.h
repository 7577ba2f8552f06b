// Error checks for CUDA runtime and cuBLASLt calls: a failed call becomes a moeserve::Error naming the call,
// file and line. No fmt here, so that .cu files (compiled by nvcc) can include it.
#pragma once

#include <cuda_runtime.h>

namespace moeserve::cuda {

[[noreturn]] void fail_cuda(const char* call, const char* message, const char* file, int line);

inline void check_cuda(cudaError_t status, const char* call, const char* file, int line) {
  if (status != cudaSuccess) fail_cuda(call, cudaGetErrorString(status), file, line);
}

// Makes `device` current, or fails saying why it cannot be used (device_diagnosis.h): no driver, no GPU, a driver
// older than the runtime, no such device.
void select_cuda_device(int device);

// Lets `kernel` (a __global__ function) launch with up to `bytes` of dynamic shared memory on the current device.
// The attribute belongs to the function in the current device's context, so it is set once per kernel and device
// (a once-per-process flag left every device but the first at the 48 KiB default: launches there failed).
void allow_dynamic_shared_memory(const void* kernel, int bytes);

// The current device's free and total memory (cudaMemGetInfo).
struct DeviceMemory {
  size_t free = 0, total = 0;
};
DeviceMemory device_memory();

}  // namespace moeserve::cuda

#define MOESERVE_CUDA_CHECK(call) ::moeserve::cuda::check_cuda((call), #call, __FILE__, __LINE__)
// After a kernel launch: reports a bad configuration (grid, shared memory) at the launch site.
#define MOESERVE_CUDA_CHECK_LAUNCH() MOESERVE_CUDA_CHECK(cudaGetLastError())

#include "runner/cuda/cuda_check.h"

#include <map>
#include <mutex>
#include <utility>

#include "runner/cuda/device_diagnosis.h"
#include "util/error.h"

namespace moeserve::cuda {

void fail_cuda(const char* call, const char* message, const char* file, int line) {
  fail("CUDA: {} failed: {} ({}:{})", call, message, file, line);
}

void select_cuda_device(int device) {
  CudaProbe probe;
  cudaDriverGetVersion(&probe.driver_version);
  cudaRuntimeGetVersion(&probe.runtime_version);
  const cudaError_t counted = cudaGetDeviceCount(&probe.device_count);
  if (counted == cudaErrorNoDevice) probe.count_status = CudaProbe::Count::no_device;
  if (counted == cudaErrorInsufficientDriver) probe.count_status = CudaProbe::Count::insufficient_driver;
  if (counted != cudaSuccess && probe.count_status == CudaProbe::Count::ok) {
    probe.count_status = CudaProbe::Count::other;
    probe.count_error = cudaGetErrorString(counted);
  }
  const std::string reason = cuda_unavailable_reason(probe, device);
  if (!reason.empty()) fail("{}", reason);
  MOESERVE_CUDA_CHECK(cudaSetDevice(device));
}

void allow_dynamic_shared_memory(const void* kernel, int bytes) {
  int device = 0;
  MOESERVE_CUDA_CHECK(cudaGetDevice(&device));
  static std::mutex mutex;
  static std::map<std::pair<const void*, int>, int> allowed;  // (kernel, device) -> bytes set
  std::lock_guard lock(mutex);
  int& set = allowed[{kernel, device}];
  if (set >= bytes) return;
  MOESERVE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  set = bytes;
}

DeviceMemory device_memory() {
  DeviceMemory m;
  MOESERVE_CUDA_CHECK(cudaMemGetInfo(&m.free, &m.total));
  return m;
}

}  // namespace moeserve::cuda

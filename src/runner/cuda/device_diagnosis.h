// Why --device cuda cannot run, in the user's terms. The CUDA runtime answers a machine without an NVIDIA driver
// with cudaErrorInsufficientDriver ("CUDA driver version is insufficient for CUDA runtime version"), which blames
// a driver that is not there; this tells that case (no driver: no CUDA device) from a driver that is really too old
// and from a driver that sees no GPU. Plain C++, so that it builds and is tested without CUDA.
#pragma once

#include <string>

namespace moeserve::cuda {

// What the CUDA runtime said, reduced to what matters here.
struct CudaProbe {
  int driver_version = 0;   // cudaDriverGetVersion: 1000 * major + 10 * minor; 0 when no driver is installed
  int runtime_version = 0;  // cudaRuntimeGetVersion, the same encoding
  enum class Count { ok, no_device, insufficient_driver, other } count_status = Count::ok;  // cudaGetDeviceCount's
  std::string count_error;  // its error string when count_status is other
  int device_count = 0;
};

// "" when `device` can be used; otherwise the sentence to fail with.
std::string cuda_unavailable_reason(const CudaProbe& probe, int device);

}  // namespace moeserve::cuda

#include "runner/cuda/device_diagnosis.h"

#include <fmt/format.h>

namespace moeserve::cuda {
namespace {

std::string version(int v) { return fmt::format("{}.{}", v / 1000, v % 1000 / 10); }

}  // namespace

std::string cuda_unavailable_reason(const CudaProbe& p, int device) {
  // CUDA Runtime API, cudaDriverGetVersion: "If no driver is installed, then 0 is returned as the driver version".
  if (p.driver_version == 0)
    return "--device cuda: no CUDA device found (no NVIDIA driver is installed: libcuda.so.1 is missing)";
  switch (p.count_status) {
    case CudaProbe::Count::no_device:
      return fmt::format("--device cuda: no CUDA device found (the NVIDIA driver, CUDA {}, sees no GPU)",
                         version(p.driver_version));
    case CudaProbe::Count::insufficient_driver:
      return fmt::format(
          "--device cuda: the NVIDIA driver supports CUDA {}, older than the CUDA {} runtime moeserve was built "
          "with: update the driver",
          version(p.driver_version), version(p.runtime_version));
    case CudaProbe::Count::other:
      return "--device cuda: the CUDA runtime cannot count the GPUs: " + p.count_error;
    case CudaProbe::Count::ok:
      break;
  }
  if (p.device_count == 0) return "--device cuda: no CUDA device found";
  if (device < 0 || device >= p.device_count)
    return fmt::format("--device cuda: device {} requested, {} found", device, p.device_count);
  return "";
}

}  // namespace moeserve::cuda

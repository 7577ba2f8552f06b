// --device cuda's reasons for not running: a machine without an NVIDIA driver has no CUDA device (the runtime's own
// "driver version is insufficient" would blame a driver that is not there), and that is told apart from a driver
// that sees no GPU, a driver older than the runtime, and a device index past the last GPU.
#include "runner/cuda/device_diagnosis.h"

#include <gtest/gtest.h>

namespace moeserve::cuda {
namespace {

TEST(CudaDeviceDiagnosis, NoDriverIsNoDeviceNotAnOldDriver) {
  // What cudart reports on a machine without the driver: version 0 and cudaErrorInsufficientDriver.
  CudaProbe probe;
  probe.runtime_version = 13000;
  probe.count_status = CudaProbe::Count::insufficient_driver;
  const std::string reason = cuda_unavailable_reason(probe, 0);
  EXPECT_NE(reason.find("no CUDA device found"), std::string::npos) << reason;
  EXPECT_EQ(reason.find("insufficient"), std::string::npos) << reason;
  EXPECT_EQ(reason.find("update the driver"), std::string::npos) << reason;
}

TEST(CudaDeviceDiagnosis, EachOtherCaseSaysWhatItIs) {
  CudaProbe probe;
  probe.driver_version = 12040;
  probe.runtime_version = 13000;
  probe.count_status = CudaProbe::Count::insufficient_driver;
  EXPECT_EQ(cuda_unavailable_reason(probe, 0),
            "--device cuda: the NVIDIA driver supports CUDA 12.4, older than the CUDA 13.0 runtime moeserve was built "
            "with: update the driver");
  probe.count_status = CudaProbe::Count::no_device;
  EXPECT_EQ(cuda_unavailable_reason(probe, 0), "--device cuda: no CUDA device found (the NVIDIA driver, CUDA 12.4, "
                                               "sees no GPU)");
  probe.count_status = CudaProbe::Count::ok;
  probe.device_count = 0;
  EXPECT_EQ(cuda_unavailable_reason(probe, 0), "--device cuda: no CUDA device found");
  probe.device_count = 2;
  EXPECT_EQ(cuda_unavailable_reason(probe, 2), "--device cuda: device 2 requested, 2 found");
  EXPECT_EQ(cuda_unavailable_reason(probe, 1), "");
  probe.count_status = CudaProbe::Count::other;
  probe.count_error = "unknown error";
  EXPECT_EQ(cuda_unavailable_reason(probe, 0), "--device cuda: the CUDA runtime cannot count the GPUs: unknown error");
}

}  // namespace
}  // namespace moeserve::cuda

// The GPUs a result was measured on, and their energy over a run, through NVML loaded at run time
// (dlopen("libnvidia-ml.so.1")), so that nothing needs a GPU or the CUDA toolkit to build, and a machine without
// one records the GPU fields as absent.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

namespace moeserve::bench {

// {"nvml": "absent", "reason": ...} without NVML; otherwise the driver version, the CUDA version the driver
// supports, and each GPU's index, name and UUID.
nlohmann::json describe_gpus();

// Energy drawn by every GPU NVML sees, between start() and stop().
class EnergyMeter {
 public:
  virtual ~EnergyMeter() = default;
  virtual void start() = 0;
  // Joules since start(), summed over the GPUs; nullopt if a reading failed.
  virtual std::optional<double> stop() = 0;
  // How the energy is measured ("total energy counter" or "power samples every 100 ms").
  virtual std::string method() const = 0;
};

// Null when NVML or a GPU is absent.
std::unique_ptr<EnergyMeter> open_energy_meter();

}  // namespace moeserve::bench

#include "bench/gpu_info.h"

#include <dlfcn.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace moeserve::bench {
namespace {

// The few NVML entry points we use (NVML's C ABI: every call returns 0 on success; devices are opaque handles).
struct Nvml {
  using Device = void*;
  int (*init)() = nullptr;
  int (*shutdown)() = nullptr;
  int (*driver_version)(char*, unsigned) = nullptr;
  int (*cuda_driver_version)(int*) = nullptr;
  int (*device_count)(unsigned*) = nullptr;
  int (*device_by_index)(unsigned, Device*) = nullptr;
  int (*device_name)(Device, char*, unsigned) = nullptr;
  int (*device_uuid)(Device, char*, unsigned) = nullptr;
  int (*total_energy)(Device, unsigned long long*) = nullptr;  // mJ since the driver loaded
  int (*power_usage)(Device, unsigned*) = nullptr;             // mW now
  std::vector<Device> devices;
  std::string error;

  // Loads the library and initialises NVML once per process; `error` says why not.
  static Nvml& get() {
    static Nvml nvml = load();
    return nvml;
  }

 private:
  static Nvml load() {
    Nvml n;
    void* lib = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      n.error = "libnvidia-ml.so.1 not found";
      return n;
    }
    auto sym = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(::dlsym(lib, name));
    };
    sym(n.init, "nvmlInit_v2");
    sym(n.shutdown, "nvmlShutdown");
    sym(n.driver_version, "nvmlSystemGetDriverVersion");
    sym(n.cuda_driver_version, "nvmlSystemGetCudaDriverVersion_v2");
    sym(n.device_count, "nvmlDeviceGetCount_v2");
    sym(n.device_by_index, "nvmlDeviceGetHandleByIndex_v2");
    sym(n.device_name, "nvmlDeviceGetName");
    sym(n.device_uuid, "nvmlDeviceGetUUID");
    sym(n.total_energy, "nvmlDeviceGetTotalEnergyConsumption");
    sym(n.power_usage, "nvmlDeviceGetPowerUsage");
    if (!n.init || !n.device_count || !n.device_by_index || n.init() != 0) {
      n.error = "NVML did not initialise";
      return n;
    }
    unsigned count = 0;
    if (n.device_count(&count) != 0) count = 0;
    for (unsigned i = 0; i < count; ++i) {
      Device d = nullptr;
      if (n.device_by_index(i, &d) == 0) n.devices.push_back(d);
    }
    if (n.devices.empty()) n.error = "NVML sees no GPU";
    return n;
  }
};

std::string nvml_string(int (*fn)(Nvml::Device, char*, unsigned), Nvml::Device d) {
  char buffer[256] = {};
  return fn && fn(d, buffer, sizeof buffer) == 0 ? std::string(buffer) : std::string();
}

// Energy from the devices' total-energy counters (Volta and later).
class CounterEnergyMeter : public EnergyMeter {
 public:
  void start() override { start_ = read(); }
  std::optional<double> stop() override {
    const std::optional<unsigned long long> end = read();
    if (!start_ || !end) return std::nullopt;
    return static_cast<double>(*end - *start_) / 1000.0;
  }
  std::string method() const override { return "NVML total energy counters, summed over the GPUs"; }
  static std::optional<unsigned long long> read() {
    Nvml& n = Nvml::get();
    unsigned long long total = 0;
    for (Nvml::Device d : n.devices) {
      unsigned long long mj = 0;
      if (!n.total_energy || n.total_energy(d, &mj) != 0) return std::nullopt;
      total += mj;
    }
    return total;
  }

 private:
  std::optional<unsigned long long> start_;
};

// Energy by integrating power readings taken every 100 ms (trapezoids), for GPUs without the counter.
class SampledEnergyMeter : public EnergyMeter {
 public:
  ~SampledEnergyMeter() override { stop(); }
  void start() override {
    joules_ = 0;
    failed_ = false;
    running_ = true;
    thread_ = std::thread([this] {
      auto last_time = std::chrono::steady_clock::now();
      std::optional<double> last_watts = watts();
      while (running_) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        const auto now = std::chrono::steady_clock::now();
        const std::optional<double> w = watts();
        if (!w || !last_watts) failed_ = true;
        if (w && last_watts) joules_ += (*w + *last_watts) / 2 * std::chrono::duration<double>(now - last_time).count();
        last_time = now;
        last_watts = w;
      }
    });
  }
  std::optional<double> stop() override {
    if (!running_.exchange(false)) return failed_ ? std::nullopt : std::optional<double>(joules_);
    thread_.join();
    return failed_ ? std::nullopt : std::optional<double>(joules_);
  }
  std::string method() const override { return "NVML power readings every 100 ms, integrated, summed over GPUs"; }

 private:
  static std::optional<double> watts() {
    Nvml& n = Nvml::get();
    double total = 0;
    for (Nvml::Device d : n.devices) {
      unsigned mw = 0;
      if (!n.power_usage || n.power_usage(d, &mw) != 0) return std::nullopt;
      total += mw / 1000.0;
    }
    return total;
  }
  std::atomic<bool> running_{false};
  std::atomic<bool> failed_{false};
  double joules_ = 0;
  std::thread thread_;
};

}  // namespace

nlohmann::json describe_gpus() {
  Nvml& n = Nvml::get();
  if (!n.error.empty()) return {{"nvml", "absent"}, {"reason", n.error}};
  nlohmann::json info;
  char driver[128] = {};
  if (n.driver_version && n.driver_version(driver, sizeof driver) == 0) info["driver_version"] = driver;
  int cuda = 0;
  if (n.cuda_driver_version && n.cuda_driver_version(&cuda) == 0)
    info["cuda_driver_version"] = std::to_string(cuda / 1000) + "." + std::to_string(cuda % 1000 / 10);
  nlohmann::json gpus = nlohmann::json::array();
  for (size_t i = 0; i < n.devices.size(); ++i)
    gpus.push_back({{"index", i},
                    {"name", nvml_string(n.device_name, n.devices[i])},
                    {"uuid", nvml_string(n.device_uuid, n.devices[i])}});
  info["gpus"] = gpus;
  return info;
}

std::unique_ptr<EnergyMeter> open_energy_meter() {
  Nvml& n = Nvml::get();
  if (!n.error.empty()) return nullptr;
  if (CounterEnergyMeter::read()) return std::make_unique<CounterEnergyMeter>();
  return std::make_unique<SampledEnergyMeter>();
}

}  // namespace moeserve::bench

// The host-side switch for programmatic dependent launch (PDL, sm_90+): when on, kernels go out with
// cudaLaunchAttributeProgrammaticStreamSerialization, so a kernel's blocks may start while the one before it in the
// stream drains, and each waits (griddepcontrol.wait, runner/cuda/launch.cuh) before touching its predecessor's
// memory. Only scheduling changes, never arithmetic. Off by default; MOESERVE_PDL=1 turns it on for the process,
// set_programmatic_launch() for tests and --pdl flags. No CUDA here: the decision is tested without a GPU.
#pragma once

#include <cstdint>

namespace moeserve::cuda {

// MOESERVE_PDL's value: unset (nullptr), "" or "0" is off, "1" is on; anything else throws an Error naming it.
bool parse_programmatic_launch_env(const char* value);

// The process-wide switch: set_programmatic_launch()'s last value, else MOESERVE_PDL read once at the first call
// (a bad value throws there, at the first kernel launch, or wherever the runner asks first).
bool programmatic_launch_enabled();
void set_programmatic_launch(bool enabled);

// The runtime's special stream handles (driver_types.h: 0, cudaStreamLegacy, cudaStreamPerThread; runner_cuda_test
// checks they agree). PDL is not allowed on the legacy default stream, so no default stream gets it; the runner's
// own streams are non-blocking streams of their own.
inline constexpr std::uintptr_t kNullStream = 0, kLegacyStream = 0x1, kPerThreadStream = 0x2;
inline bool is_default_stream(std::uintptr_t stream) {
  return stream == kNullStream || stream == kLegacyStream || stream == kPerThreadStream;
}

// Whether a launch on `stream` asks for programmatic stream serialization.
inline bool request_programmatic_launch(bool enabled, std::uintptr_t stream) {
  return enabled && !is_default_stream(stream);
}

}  // namespace moeserve::cuda

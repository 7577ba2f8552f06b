// Kernel launches with programmatic dependent launch (PDL) when its switch is on (programmatic_launch.h).
// A kernel launched with the attribute may start while its predecessor in the stream is still running, so every
// kernel launched through cuda_launch calls pdl_prologue() as its first statement, before it reads anything the
// previous kernel wrote or writes anything it reads. Launched without the attribute, the prologue costs nothing:
// griddepcontrol.wait returns at once when there is no programmatic dependency.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <utility>

#include "runner/cuda/programmatic_launch.h"

namespace moeserve::cuda {

// Waits until the previous kernel in the stream has finished and its writes are visible (griddepcontrol.wait),
// then lets the next kernel start its blocks (launch_dependents): they run only up to their own wait, which holds
// them until this whole grid has finished, so signalling this early is safe and gives the most overlap.
__device__ __forceinline__ void pdl_prologue() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Whether a launch on `stream` carries programmatic_serialization() now.
inline bool programmatic_launch_on(cudaStream_t stream) {
  return request_programmatic_launch(programmatic_launch_enabled(), reinterpret_cast<std::uintptr_t>(stream));
}

inline cudaLaunchAttribute programmatic_serialization() {
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  return attribute;
}

// Launches kernel<<<grid, block, shared_bytes, stream>>>(args...), with programmatic stream serialization when
// programmatic_launch_on(stream). Returns the launch's status, for the caller to check with MOESERVE_CUDA_CHECK at
// the launch site (which then names the kernel, file and line, as MOESERVE_CUDA_CHECK_LAUNCH does after <<<>>>).
template <typename... Params, typename... Args>
[[nodiscard]] cudaError_t cuda_launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes,
                                      cudaStream_t stream, Args&&... args) {
  cudaLaunchAttribute programmatic = programmatic_serialization();
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  if (programmatic_launch_on(stream)) {
    config.attrs = &programmatic;
    config.numAttrs = 1;
  }
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

}  // namespace moeserve::cuda

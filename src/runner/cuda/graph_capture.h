// Capturing a fixed sequence of launches as a CUDA graph, for the runner's
// decode steps and the draft head's chains.
#pragma once

#include <cuda_runtime.h>

#include <functional>

namespace moeserve::cuda {

// Records what `enqueue` launches on `stream` (thread-local capture mode) and
// returns the instantiated graph; if enqueue throws, the capture is ended and
// the exception goes on.
cudaGraphExec_t capture_graph(cudaStream_t stream, const std::function<void()>& enqueue);

}  // namespace moeserve::cuda

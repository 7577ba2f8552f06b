#include "runner/cuda/graph_capture.h"

#include "runner/cuda/cuda_check.h"

namespace moeserve::cuda {

cudaGraphExec_t capture_graph(cudaStream_t stream, const std::function<void()>& enqueue) {
  cudaGraph_t graph = nullptr;
  MOESERVE_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  try {
    enqueue();
  } catch (...) {
    cudaStreamEndCapture(stream, &graph);
    if (graph != nullptr) cudaGraphDestroy(graph);
    throw;
  }
  MOESERVE_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec = nullptr;
  const cudaError_t instantiated = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  MOESERVE_CUDA_CHECK(instantiated);
  return exec;
}

}  // namespace moeserve::cuda

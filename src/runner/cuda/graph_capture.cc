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

int graph_bucket(int sequences) {
  int bucket = 1;
  while (bucket < sequences) bucket *= 2;
  return bucket;
}

int graph_query_len(const ForwardBatch& batch) {
  const int S = static_cast<int>(batch.sequences.size());
  if (S == 0) return 0;
  const int q_len = static_cast<int>(batch.sequences[0].tokens.size());
  if (q_len > kLargestGraphQueryLen || graph_bucket(S) * q_len > kLargestGraphBatch) return 0;
  for (const SequenceStep& step : batch.sequences)
    if (static_cast<int>(step.tokens.size()) != q_len || step.num_logits != q_len || !step.tree_parent.empty())
      return 0;
  return q_len;
}

void StepGraphs::run(const GraphKeyRef& key, cudaStream_t stream, const std::function<void()>& enqueue) {
  if (auto it = graphs_.find(key); it != graphs_.end()) {
    MOESERVE_CUDA_CHECK(cudaGraphLaunch(it->second, stream));
    return;
  }
  enqueue();
  const cudaGraphExec_t exec = capture_graph(stream, enqueue);
  graphs_.emplace(GraphKey{key.bucket, key.q_len, key.context, key.capture_layers}, exec);
}

void StepGraphs::clear() {
  for (auto& [key, exec] : graphs_) cudaGraphExecDestroy(exec);
  graphs_.clear();
}

}  // namespace moeserve::cuda

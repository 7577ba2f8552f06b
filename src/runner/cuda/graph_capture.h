// Capturing a fixed sequence of launches as a CUDA graph, for the runners' decode and chain verify steps and the
// draft heads' chains; which steps are graph-shaped, the bucket they pad to, and the graphs of one runner by key.
// Shared by the GPT-OSS runner (cuda_runner.h) and the DeepSeek runner and its MTP head
// (deepseek_cuda_runner.h, deepseek_mtp_cuda_drafter.h).
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <map>
#include <tuple>
#include <vector>

#include "runner/runner.h"

namespace moeserve::cuda {

// Records what `enqueue` launches on `stream` (thread-local capture mode) and
// returns the instantiated graph; if enqueue throws, the capture is ended and
// the exception goes on.
cudaGraphExec_t capture_graph(cudaStream_t stream, const std::function<void()>& enqueue);

// Graph-shaped steps: every sequence the same q_len tokens and as many logits rows, no tree (decode steps, and
// chain verify steps: EAGLE-3's or MTP's k + 1 tokens, k up to 7), at most kLargestGraphBatch tokens once padded.
inline constexpr int kLargestGraphBatch = 1024;
inline constexpr int kLargestGraphQueryLen = 8;
// The batch-size bucket a step of `sequences` sequences is padded to: the next power of two.
int graph_bucket(int sequences);
// The batch's tokens a sequence when it is graph-shaped (above), else 0.
int graph_query_len(const ForwardBatch& batch);

// A replayable step's key: its batch-size bucket, tokens a sequence (a chain's length for a draft head), the
// context its launches are sized for (0 where none depends on it, as in GPT-OSS's steps), and the layers captured.
struct GraphKey {
  int bucket = 0, q_len = 0, context = 0;
  std::vector<int> capture_layers;
};
// A step's key to look up: the batch's own layer list, not a copy of it every graphed step.
struct GraphKeyRef {
  int bucket, q_len, context;
  const std::vector<int>& capture_layers;
};
// Orders GraphKey and GraphKeyRef alike (bucket, q_len, context, then the layer lists lexicographically): find()
// takes either.
struct GraphKeyLess {
  using is_transparent = void;
  static auto fields(const auto& key) { return std::tie(key.bucket, key.q_len, key.context, key.capture_layers); }
  bool operator()(const auto& a, const auto& b) const { return fields(a) < fields(b); }
};

// The graphs of one runner or head, by key. A graph holds the addresses its launches were captured with: whoever
// owns the buffers it reads and writes clears it when one of them is reallocated.
class StepGraphs {
 public:
  StepGraphs() = default;
  ~StepGraphs() { clear(); }
  StepGraphs(const StepGraphs&) = delete;
  StepGraphs& operator=(const StepGraphs&) = delete;

  // Replays key's graph on `stream`; the first step of a key runs `enqueue` directly (which also makes every
  // cuBLASLt plan and sets the kernels' attributes, none of which may happen during a capture), then captures it
  // for the steps after.
  void run(const GraphKeyRef& key, cudaStream_t stream, const std::function<void()>& enqueue);
  void clear();
  size_t size() const { return graphs_.size(); }

 private:
  std::map<GraphKey, cudaGraphExec_t, GraphKeyLess> graphs_;
};

}  // namespace moeserve::cuda

// GPU time of a step by kernel class, for benchmarks and profiled runs: when enabled, the runner records a CUDA
// event on its stream where each class of kernels begins (and one at the end of the step) and, once the step has
// synchronised, adds every interval to its class. Timed steps run without CUDA graphs (events between graph
// nodes would change what is measured); the launch gaps that graphs remove then count towards the class that
// follows them, so the classes add up to the step's GPU time as launched, not as replayed.
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <string_view>
#include <vector>

namespace moeserve::cuda {

enum class KernelClass {
  embedding,
  norm,              // residual add + RMSNorm (the MoE combine fused in; a tensor-parallel rank's: expert_mlp2)
  qkv_projection,    // dense GEMM / GEMV
  rope_kv_write,
  attention_prefill,
  attention_decode,  // split-key kernel and its combine
  output_projection,
  router,            // router projection and top-k (steps of up to kRouteGroupRunnerTokens: the projection only)
  grouping,          // (token, expert) pairs grouped by expert (and the fused top-k of small steps)
  expert_mlp1,       // first expert projection with SwiGLU
  expert_mlp2,
  unembedding,       // final rows gathered, logits projection
  sampling,          // argmax and the sampling kernel
  metadata_upload,   // the step's metadata copied to the device
  collective,        // sums with the other ranks of a tensor-parallel group
  latent_expansion,  // DeepSeek's expanded MLA prefill: the cached latents through kv_b into per-head K / V
  dense_mlp,         // DeepSeek's dense MLP (the first layers) and shared expert
  expert_combine,    // DeepSeek's weighted sum of the routed experts' rows and the shared expert's
  count
};
inline constexpr int kKernelClasses = static_cast<int>(KernelClass::count);
std::string_view kernel_class_name(KernelClass c);

struct KernelTimes {
  std::array<double, kKernelClasses> ms{};  // summed over the timed steps
  int64_t steps = 0;
  double host_ms = 0;  // forward() wall time summed over the same steps (GPU time plus host work and waits)
  double gpu_ms() const;
};

class KernelTimer {
 public:
  KernelTimer() = default;
  ~KernelTimer();
  KernelTimer(const KernelTimer&) = delete;
  KernelTimer& operator=(const KernelTimer&) = delete;

  void set_enabled(bool enabled) { enabled_ = enabled; }
  bool enabled() const { return enabled_; }
  // The kernels enqueued on `stream` from here on, up to the next mark, belong to `c`.
  void mark(cudaStream_t stream, KernelClass c);
  // Ends the step's last interval; after the stream has synchronised, adds the step's intervals to the totals.
  void finish_step(cudaStream_t stream, double host_ms);
  const KernelTimes& totals() const { return totals_; }
  void reset() { totals_ = {}; }

 private:
  cudaEvent_t event(size_t i);

  bool enabled_ = false;
  std::vector<cudaEvent_t> events_;  // a pool, reused step after step
  std::vector<KernelClass> classes_;  // classes_[i] starts at events_[i]
  KernelTimes totals_;
};

}  // namespace moeserve::cuda

#include "runner/cuda/kernel_timer.h"

#include <numeric>

#include "runner/cuda/cuda_check.h"

namespace moeserve::cuda {

std::string_view kernel_class_name(KernelClass c) {
  switch (c) {
    case KernelClass::embedding: return "embedding";
    case KernelClass::norm: return "add + RMSNorm";
    case KernelClass::qkv_projection: return "QKV projection";
    case KernelClass::rope_kv_write: return "RoPE + KV write";
    case KernelClass::attention_prefill: return "attention (prefill tiles)";
    case KernelClass::attention_decode: return "attention (decode)";
    case KernelClass::output_projection: return "output projection";
    case KernelClass::router: return "router + top-k";
    case KernelClass::grouping: return "grouping by expert";
    case KernelClass::expert_mlp1: return "experts mlp1 + SwiGLU";
    case KernelClass::expert_mlp2: return "experts mlp2";
    case KernelClass::unembedding: return "unembedding";
    case KernelClass::sampling: return "argmax / sampling";
    case KernelClass::metadata_upload: return "metadata upload";
    case KernelClass::collective: return "all-reduce (tensor parallel)";
    case KernelClass::latent_expansion: return "MLA latent expansion (kv_b)";
    case KernelClass::dense_mlp: return "dense MLP / shared expert";
    case KernelClass::expert_combine: return "experts' combine";
    case KernelClass::count: break;
  }
  return "?";
}

double KernelTimes::gpu_ms() const { return std::accumulate(ms.begin(), ms.end(), 0.0); }

KernelTimer::~KernelTimer() {
  for (cudaEvent_t e : events_) cudaEventDestroy(e);
}

cudaEvent_t KernelTimer::event(size_t i) {
  while (events_.size() <= i) {
    cudaEvent_t e = nullptr;
    MOESERVE_CUDA_CHECK(cudaEventCreate(&e));
    events_.push_back(e);
  }
  return events_[i];
}

void KernelTimer::mark(cudaStream_t stream, KernelClass c) {
  if (!enabled_) return;
  MOESERVE_CUDA_CHECK(cudaEventRecord(event(classes_.size()), stream));
  classes_.push_back(c);
}

void KernelTimer::finish_step(cudaStream_t stream, double host_ms) {
  if (!enabled_ || classes_.empty()) return;
  const size_t n = classes_.size();
  MOESERVE_CUDA_CHECK(cudaEventRecord(event(n), stream));
  MOESERVE_CUDA_CHECK(cudaEventSynchronize(event(n)));
  for (size_t i = 0; i < n; ++i) {
    float ms = 0;
    MOESERVE_CUDA_CHECK(cudaEventElapsedTime(&ms, events_[i], events_[i + 1]));
    totals_.ms[static_cast<int>(classes_[i])] += ms;
  }
  ++totals_.steps;
  totals_.host_ms += host_ms;
  classes_.clear();
}

}  // namespace moeserve::cuda

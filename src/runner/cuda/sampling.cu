// Greedy sampling on the GPU: the argmax of each logits row (the lowest id among equal maxima, as
// engine/sampler's argmax). One block per row.
// CPU reference: moeserve::argmax.
#include <cmath>

#include "runner/cuda/device_common.cuh"

namespace moeserve::cuda {
namespace {

__device__ __forceinline__ void keep_better(float& value, int& id, float other, int other_id) {
  if (other > value || (other == value && other_id < id)) {
    value = other;
    id = other_id;
  }
}

__global__ void argmax_kernel(const float* logits, int V, int32_t* out) {
  const float* row = logits + static_cast<int64_t>(blockIdx.x) * V;
  float best = -INFINITY;
  int best_id = V;
  for (int i = threadIdx.x; i < V; i += blockDim.x) keep_better(best, best_id, row[i], i);
  for (int offset = 16; offset > 0; offset >>= 1)
    keep_better(best, best_id, __shfl_xor_sync(0xffffffffu, best, offset), __shfl_xor_sync(0xffffffffu, best_id, offset));
  __shared__ float values[32];
  __shared__ int ids[32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) {
    values[warp] = best;
    ids[warp] = best_id;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < static_cast<int>(blockDim.x / 32); ++w) keep_better(best, best_id, values[w], ids[w]);
    out[blockIdx.x] = best_id < V ? best_id : 0;  // all -inf (or NaN): id 0, as the CPU argmax
  }
}

}  // namespace

void launch_argmax(cudaStream_t stream, const float* logits, int R, int V, int32_t* out) {
  if (R == 0) return;
  argmax_kernel<<<R, 1024, 0, stream>>>(logits, V, out);
  MOESERVE_CUDA_CHECK_LAUNCH();
}

}  // namespace moeserve::cuda

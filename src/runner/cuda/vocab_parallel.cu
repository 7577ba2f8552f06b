// The distributed argmax of a rank whose unembedding is its slice of the vocabulary (runner/parallel/vocab_best.h
// has the rule, the CPU ranks' too): each rank's first maximum per row, as (value, global id), and the merge of the
// ranks' all-gathered bests into the row's token. CPU reference: cpu::vocab_parallel_greedy.
#include "runner/cuda/device_common.cuh"
#include "runner/cuda/launch.cuh"
#include "runner/parallel/vocab_best.h"

namespace moeserve::cuda {
namespace {

__global__ void vocab_best_kernel(const float* logits, int R, int slice, int64_t begin, const int32_t* local,
                                  VocabBest* out) {
  pdl_prologue();
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= R) return;
  const int32_t i = local[r];
  out[r] = {logits[static_cast<int64_t>(r) * slice + i], static_cast<int32_t>(begin + i)};
}

__global__ void merge_vocab_best_kernel(const VocabBest* all, int R, int ranks, int32_t* out) {
  pdl_prologue();
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r < R) out[r] = merge_vocab_best(all, R, ranks, r).token;
}

}  // namespace

void launch_vocab_best(cudaStream_t stream, const float* logits, int R, int slice, int64_t begin, const int32_t* local,
                       VocabBest* out) {
  if (R == 0) return;
  MOESERVE_CUDA_CHECK(
      cuda_launch(vocab_best_kernel, (R + 255) / 256, 256, 0, stream, logits, R, slice, begin, local, out));
}

void launch_merge_vocab_best(cudaStream_t stream, const VocabBest* all, int R, int ranks, int32_t* out) {
  if (R == 0) return;
  MOESERVE_CUDA_CHECK(cuda_launch(merge_vocab_best_kernel, (R + 255) / 256, 256, 0, stream, all, R, ranks, out));
}

}  // namespace moeserve::cuda

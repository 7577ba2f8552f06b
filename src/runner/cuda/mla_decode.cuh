// What the two MLA decode kernels share (mla_decode.cu: version 1, the merge and the launcher; mla_decode_mma.cu:
// version 2): the last position a query token sees, where a (token, head, split) partial lives, the two bf16
// halves of a word, and version 2's launch.
#pragma once

#include "runner/cuda/device_common.cuh"

namespace moeserve::cuda {

__device__ __forceinline__ float bf16_low(uint32_t word) { return __uint_as_float(word << 16); }
__device__ __forceinline__ float bf16_high(uint32_t word) { return __uint_as_float(word & 0xffff0000u); }

// The last position token t sees (its own; tree steps are refused on the host).
__device__ __forceinline__ int mla_last_position(const StepView& step, int t) {
  return token_slot(step, t, step.token_seq[t]);
}

// Block (t, split)'s key range: its sequence, first position and key count; false when the token sees no position
// of it (the launch sizes its grid for the step's longest context). Traps when the scratch holds fewer splits than
// the token has.
struct MlaSplit {
  int seq = 0, k0 = 0, n = 0;
};
__device__ __forceinline__ bool mla_split(const StepView& step, const MlaDecodeScratch& scratch, int t, int split,
                                          MlaSplit& s) {
  const int last = mla_last_position(step, t);
  if (mla_decode_splits(last, scratch.split_keys) > scratch.max_splits) __trap();
  s.seq = step.token_seq[t];
  s.k0 = split * scratch.split_keys;
  s.n = min(scratch.split_keys, last + 1 - s.k0);
  return s.k0 <= last;
}

// The partial (max, sum, then kv_lora_rank output floats) of token t, head `head`, split `split`.
__device__ __forceinline__ float* mla_partial(const MlaDecodeParams& p, const MlaDecodeScratch& scratch, int t, int head,
                                              int split) {
  return scratch.partial + ((static_cast<int64_t>(t) * p.heads + head) * scratch.max_splits + split) *
                               mla_partial_stride(p.cache.shape.kv_lora_rank);
}

// Version 2's splits, for a shape launch_mla_decode has checked (mla_shape_error) and a bf16 or fp8 cache; the
// caller then launches the merge.
void launch_mla_decode_mma(cudaStream_t stream, const MlaDecodeParams& params, const StepView& step,
                           const MlaDecodeScratch& scratch);

}  // namespace moeserve::cuda

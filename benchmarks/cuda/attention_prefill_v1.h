// Version 1 of prefill attention (mma.sync, one query head per 64-row block), attention_bench's baseline for the
// runner's version 2 (runner/cuda/kernels.h: launch_attention_prefill); same parameters and output.
#pragma once

#include "runner/cuda/kernels.h"

namespace moeserve::bench_cuda {

void launch_attention_prefill_v1(cudaStream_t stream, const cuda::AttentionParams& params, const cuda::StepView& step);

}  // namespace moeserve::bench_cuda

// Making the draft heads on the GPU (runner/cuda/eagle3_cuda_drafter.h, deepseek_mtp_cuda_drafter.h), from code
// that may be built without CUDA: without it, the factories fail with "built without CUDA".
#pragma once

#include <cstdint>
#include <memory>

#include "model/config.h"
#include "model/deepseek_v3/checkpoint.h"
#include "model/eagle3/checkpoint.h"
#include "runner/cpu/eagle3_drafter.h"
#include "runner/drafter.h"
#include "runner/runner.h"

namespace moeserve {

struct CudaDrafterOptions {
  int device = 0;
  int block_size = 16;     // token slots per block of the head's own KV pool
  int64_t num_blocks = 0;  // blocks wanted in that pool; must be positive ...
  // ... and at most this fraction of the device's free memory at construction (0: no cap). The pool is allocated
  // when the drafter is made, so a target pool sized afterwards from free memory leaves room for it.
  double max_memory_fraction = 0;
  // Capture chain draft steps per (batch-size bucket, draft length); the MTP head's only where its target's steps
  // are graphed (CudaRunnerOptions::deepseek_graphs).
  bool cuda_graphs = true;
};

// The head of a checkpoint; the target's embedding (and unembedding, for a head without lm_head) is uploaded.
std::unique_ptr<speculative::Drafter> make_cuda_eagle3_drafter(
    std::shared_ptr<const speculative::Eagle3Checkpoint> head, speculative::Eagle3Target target,
    const CudaDrafterOptions& options);

// Random bf16 weights of gpt-oss-120b's EAGLE-3 head shape (hidden = the target's, intermediate 6 x hidden,
// 64 heads of 64, 8 KV heads, draft vocabulary 32000 with d2t, its own embedding), made on the GPU, for
// benchmarks; aux layers are ModelOpt's default for the target's depth.
std::unique_ptr<speculative::Drafter> make_synthetic_cuda_eagle3_drafter(const ModelConfig& target,
                                                                         const CudaDrafterOptions& options,
                                                                         uint64_t seed);

// DeepSeek's MTP head (the checkpoint's MTP layer, uploaded; the embedding and lm_head shared with the target where
// they are equal) beside `target`, the checkpoint's model on the DeepSeek CUDA runner, whose kernels, buffers and
// stream it runs on: target must outlive the drafter's calls. Chains only.
std::unique_ptr<speculative::Drafter> make_cuda_mtp_drafter(std::shared_ptr<const deepseek_v3::Checkpoint> checkpoint,
                                                            ModelRunner& target, const CudaDrafterOptions& options);

}  // namespace moeserve

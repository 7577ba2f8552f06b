// A DeepSeek-V3 model's weights in device memory (DeepseekCudaRunner). Every projection of attention and the MLPs
// keeps the checkpoint's format: FP8 e4m3 with its 128 x 128 block scales (rearranged into fp8_gemm.h's layout, the
// one cuBLASLt and deepseek_experts.cu read), or for a bf16 checkpoint dense values in the runner's precision; the
// embedding, the router gates and the lm_head are in the runner's precision (bf16, or fp32 with Precision::f32);
// norms and router biases fp32. A layer's routed experts are stacked per projection (gate, up, down: [E][rows,
// cols] each, their scales likewise), the layout deepseek_experts.cu indexes by expert.
// Made by uploading a checkpoint, or for cost measurements without the 700 GB of files, as random FP8 weights of a
// config's shapes (DeepSeek-R1's widths at a depth of the caller's choosing) made directly on the device.
#pragma once

#include <cstdint>
#include <vector>

#include "model/deepseek_v3/checkpoint.h"
#include "runner/cuda/deepseek_kernels.h"
#include "runner/cuda/device_buffer.h"

namespace moeserve::cuda {

struct DeepseekDeviceLayer {
  const float* input_norm = nullptr;           // [hidden]
  const float* post_attention_norm = nullptr;  // [hidden]
  // MLA (deepseek_v3::Attention): q when q_lora_rank is null, else q_a, q_a_norm, q_b; kv_a (latent rows, then
  // k_pe's), kv_a_norm (the latent's); kv_b (per head W_UK rows, then W_UV rows); o.
  DeviceMatrix q, q_a, q_b, kv_a, kv_b, o;
  const float* q_a_norm = nullptr;
  const float* kv_a_norm = nullptr;
  bool moe = false;
  // The dense MLP (!moe), or the routed experts (moe: count n_routed_experts each).
  DeviceMatrix gate, up, down;
  DeviceMatrix router;                 // moe: [n_routed_experts, hidden], the precision's type
  const float* router_bias = nullptr;  // moe: e_score_correction_bias [n_routed_experts]
  bool has_shared = false;             // moe with n_shared_experts > 0
  DeviceMatrix shared_gate, shared_up, shared_down;
};

class DeepseekDeviceWeights {
 public:
  // The checkpoint's main model (not its MTP layer), dense tensors converted to `precision`'s type.
  static DeepseekDeviceWeights upload(const deepseek_v3::Checkpoint& checkpoint, Precision precision);
  // Random weights of config's shapes, FP8 wherever a checkpoint has FP8, keyed by seed: e4m3 values of rms
  // kSyntheticE4m3Rms (launch_fill_e4m3) with one scale 1 / (kSyntheticE4m3Rms sqrt(cols)) everywhere, so a
  // projection's weights have make-tiny's magnitude N(0, 1 / cols); norms 1 + U(+-0.17), router biases U[0, 0.5)
  // (make-tiny's), embedding unit variance, lm_head and router gates 2 / sqrt(hidden) and 1 / sqrt(hidden).
  static DeepseekDeviceWeights synthetic(const deepseek_v3::Config& config, uint64_t seed, Precision precision);

  Precision precision = Precision::bf16;
  DeviceMatrix embedding;  // [vocab, hidden]
  DeviceMatrix lm_head;    // [vocab, hidden]
  const float* final_norm = nullptr;
  std::vector<DeepseekDeviceLayer> layers;
  size_t bytes = 0;  // device memory held

  // Where each tensor comes from (the checkpoint, or random values): deepseek_device_weights.cc.
  class Source;

 private:
  static DeepseekDeviceWeights build(const deepseek_v3::Config& config, Precision precision, Source& source);
  std::vector<DeviceBuffer> buffers_;
};

// DeepSeek's MTP module (the checkpoint's model.layers.<num_layers>.*, deepseek_v3::Mtp) on the device, for the MTP
// head beside the CUDA runner (deepseek_mtp_cuda_drafter.h), in the formats of the main model's weights. Its
// embedding and lm_head are the main model's device matrices where the module's tensors are the main ones or equal
// copies (DeepSeek-R1 stores copies: 2 x 1.85 GB that need not be uploaded twice).
class DeepseekDeviceMtp {
 public:
  // Fails naming the directory when the checkpoint has no MTP layer; `main` is the checkpoint's main model.
  static DeepseekDeviceMtp upload(const deepseek_v3::Checkpoint& checkpoint, const DeepseekDeviceWeights& main);

  const float* enorm = nullptr;  // [hidden], for the next token's embedding
  const float* hnorm = nullptr;  // [hidden], for the hidden state
  DeviceMatrix eh_proj;          // [hidden, 2 hidden]: the embedding's columns first
  DeepseekDeviceLayer layer;
  const float* head_norm = nullptr;  // shared_head.norm [hidden]
  DeviceMatrix embedding, head;      // [vocab, hidden], the precision's type (possibly the main model's)
  size_t bytes = 0;                  // device memory held (the main model's matrices not counted)

 private:
  std::vector<DeviceBuffer> buffers_;
};

}  // namespace moeserve::cuda

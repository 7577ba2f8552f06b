// A GPT-OSS model's weights in device memory: MXFP4 experts stay MXFP4 (blocks and scales as in the
// checkpoint, so gpt-oss-120b's experts take ~61 GB), dense matrices are bf16 (fp32 with Precision::f32), the
// q, k and v projections are fused into one [q + 2 kv, hidden] matrix, small vectors are fp32. Made by uploading
// a checkpoint or, for speed measurements without the real files, with random values of the real shapes
// directly on the device.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/gpt_oss/checkpoint.h"
#include "runner/cuda/device_buffer.h"
#include "runner/cuda/kernels.h"
#include "runner/parallel/communicator.h"

namespace moeserve::cuda {

// Row-major matrices stacked by rows (same column count), converted to the device's dense type on the host.
std::vector<uint8_t> dense_rows(const std::vector<const Matrix*>& parts, Precision dense);

struct DeviceLayer {
  const float* attn_norm = nullptr;
  const void* qkv = nullptr;  // [q_dim + 2 kv_dim, hidden]
  const float* qkv_bias = nullptr;
  const float* sinks = nullptr;
  const void* o = nullptr;  // [hidden, q_dim]
  const float* o_bias = nullptr;
  const float* mlp_norm = nullptr;
  const void* router = nullptr;  // [E, hidden]
  const float* router_bias = nullptr;
  ExpertWeightsView mlp1, mlp2;
};

class DeviceWeights {
 public:
  static DeviceWeights upload(const Checkpoint& checkpoint, Precision dense);
  // Weights of `config`'s shapes (a rank's slice of a checkpoint: runner/cpu/rank_weights.h); `source` names them
  // in errors. Of the experts, only [first_expert, first_expert + local_experts) go up (an expert-parallel rank's
  // share; local_experts 0: all).
  static DeviceWeights upload(const ModelConfig& config, const ModelWeights& weights, Precision dense,
                              const std::string& source, int first_expert = 0, int local_experts = 0);
  // Random weights of config's shapes with the magnitudes make-tiny uses, keyed by seed. router_skew > 0 makes
  // expert popularity Zipf-like: each layer's experts, in a random order r = 0, 1, ..., get router_skew * ln(1 / (r +
  // 1)) added to their router bias (0: the near-uniform routing of random weights).
  // local_experts > 0: that many experts' weights (an expert-parallel rank's share), the router still over all.
  // vocab: the unembedding rows made (a vocab-split rank's slice, the same values as those rows of the whole
  // matrix); empty: all of them.
  static DeviceWeights synthetic(const ModelConfig& config, uint64_t seed, Precision dense, double router_skew = 0,
                                 int local_experts = 0, IndexRange vocab = {});

  Precision dense = Precision::bf16;
  const void* embedding = nullptr;    // [vocab, hidden]
  const void* unembedding = nullptr;  // [vocab, hidden], or a vocab-split rank's rows of it
  const float* final_norm = nullptr;
  std::vector<DeviceLayer> layers;
  size_t bytes = 0;  // device memory held

 private:
  void* allocate(size_t bytes);
  // Fills e.row_scale_max (held here) for `experts` experts of e; returns the count of rows of wide scale span.
  int add_row_scale_max(ExpertWeightsView& e, int64_t experts);
  std::vector<DeviceBuffer> buffers_;
};

}  // namespace moeserve::cuda

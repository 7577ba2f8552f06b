// Per-layer scales of an fp8 KV cache (value = stored e4m3 * scale), read from a checkpoint when it has them.
#pragma once

#include <vector>

#include "model/gpt_oss/checkpoint.h"

namespace moeserve::cuda {

struct KvScales {
  std::vector<float> k, v;  // one per layer
  static KvScales ones(int layers) { return {std::vector<float>(layers, 1.0f), std::vector<float>(layers, 1.0f)}; }
};

// model.layers.N.self_attn.{k,v}_scale (also under .attn. or .{k,v}_proj., the places quantisers write them and
// vLLM's loader accepts): each a single finite positive F32 or BF16 value. A layer without one keeps 1.0, the
// scale vLLM uses without calibration; a malformed one fails naming the tensor.
KvScales read_kv_scales(const Checkpoint& checkpoint);

}  // namespace moeserve::cuda

#include "runner/cuda/kv_scales.h"

#include <cmath>
#include <cstring>

#include "util/bfloat16.h"
#include "util/error.h"

namespace moeserve::cuda {
namespace {

float scale_value(const TensorView& t) {
  MOESERVE_CHECK(t.numel() == 1, "KV cache scale {}: {} values (one expected)", t.describe(), t.numel());
  float value = 0.0f;
  if (t.dtype == DType::F32 && t.bytes.size() == 4) {
    std::memcpy(&value, t.bytes.data(), 4);
  } else if (t.dtype == DType::BF16 && t.bytes.size() == 2) {
    uint16_t bits = 0;
    std::memcpy(&bits, t.bytes.data(), 2);
    value = bf16_to_float(bits);
  } else {
    fail("KV cache scale {}: dtype must be F32 or BF16", t.describe());
  }
  MOESERVE_CHECK(std::isfinite(value) && value > 0.0f, "KV cache scale {}: {} (must be finite and positive)",
                 t.describe(), value);
  return value;
}

float layer_scale(const TensorStore& store, int layer, const char* which) {
  const std::string prefix = "model.layers." + std::to_string(layer) + ".self_attn.";
  for (const std::string& middle : {std::string(), std::string("attn."), std::string(which) + "_proj."})
    if (const TensorView* t = store.find(prefix + middle + which + "_scale")) return scale_value(*t);
  return 1.0f;
}

}  // namespace

KvScales read_kv_scales(const Checkpoint& checkpoint) {
  const int layers = checkpoint.config().num_layers;
  KvScales scales = KvScales::ones(layers);
  for (int i = 0; i < layers; ++i) {
    scales.k[i] = layer_scale(checkpoint.tensors(), i, "k");
    scales.v[i] = layer_scale(checkpoint.tensors(), i, "v");
  }
  return scales;
}

}  // namespace moeserve::cuda

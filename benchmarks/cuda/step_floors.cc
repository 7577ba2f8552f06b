#include "step_floors.h"

#include <algorithm>
#include <cmath>

#include "runner/cuda/step_metadata.h"

namespace moeserve::bench_cuda {

double uniform_touched_experts(const ModelConfig& c, int tokens) {
  const double E = c.num_experts, k = c.experts_per_token;
  return E * (1.0 - std::pow(1.0 - k / E, tokens));
}

StepCosts step_costs(const ModelConfig& c, const ForwardBatch& batch, double touched) {
  using cuda::KernelClass;
  const double H = c.hidden_size, Q = c.q_dim(), KV = c.kv_dim(), E = c.num_experts, I = c.intermediate_size,
               k = c.experts_per_token, V = c.vocab_size, L = c.num_layers;
  double T = 0, R = 0;
  for (const SequenceStep& s : batch.sequences) {
    T += static_cast<double>(s.tokens.size());
    R += s.num_logits;
  }
  StepCosts costs{};
  auto at = [&](KernelClass cls) -> ClassCost& { return costs[static_cast<int>(cls)]; };
  auto dense = [&](KernelClass cls, double out, double in, double rows, double layers) {
    at(cls).bytes += out * in * 2 * layers + rows * in * 2 * layers + rows * out * 4 * layers;
    at(cls).flops += 2 * rows * out * in * layers;
  };
  at(KernelClass::embedding).bytes = T * H * (2 + 4);
  // Per layer two norms (attention, MLP) and the final one: read x (and the delta), write x and the bf16 row.
  at(KernelClass::norm).bytes = (2 * L + 1) * T * H * (4 + 4 + 4 + 2);
  dense(KernelClass::qkv_projection, Q + 2 * KV, H, T, L);
  at(KernelClass::rope_kv_write).bytes = L * T * ((Q + 2 * KV) * 4 + (Q + 2 * KV) * 2);
  dense(KernelClass::output_projection, H, Q, T, L);
  dense(KernelClass::router, E, H, T, L);
  // Attention: each sequence's visible keys and values once per layer; q.k and p.v for every query's keys. The
  // runner runs sequences of kPrefillAttentionRows or more tokens through the prefill tiles, the rest through the
  // decode kernel.
  for (const SequenceStep& s : batch.sequences) {
    const double q = static_cast<double>(s.tokens.size()), start = s.start_position;
    ClassCost& attention = at(s.tokens.size() >= static_cast<size_t>(cuda::kPrefillAttentionRows)
                                  ? KernelClass::attention_prefill
                                  : KernelClass::attention_decode);
    for (AttentionKind kind : c.layer_types) {
      const bool sliding = kind == AttentionKind::sliding;
      const double keys_read = sliding ? std::min(start + q, c.sliding_window + q - 1) : start + q;
      attention.bytes += keys_read * KV * 2 * 2;
      double visible = 0;  // sum over the queries at positions start .. start + q - 1
      if (!sliding || start + q <= c.sliding_window) {
        visible = q * start + q * (q + 1) / 2;
        if (sliding) visible = std::min(visible, q * c.sliding_window);
      } else {
        visible = q * c.sliding_window;
      }
      attention.flops += visible * 4 * c.num_heads * c.head_dim;
    }
    attention.bytes += q * L * Q * 2 * 2;  // q in, output out
  }
  const double mxfp4 = 17.0 / 32.0;
  at(KernelClass::expert_mlp1).bytes = L * (touched * (2 * I * H * mxfp4 + 2 * I * 4) + T * k * (H * 2 + I * 2));
  at(KernelClass::expert_mlp1).flops = L * 2 * T * k * 2 * I * H;
  at(KernelClass::expert_mlp2).bytes = L * (touched * (H * I * mxfp4 + H * 4) + T * k * (I * 2 + H * 4));
  at(KernelClass::expert_mlp2).flops = L * 2 * T * k * H * I;
  dense(KernelClass::unembedding, V, H, R, 1);
  at(KernelClass::sampling).bytes = R * V * 4;
  return costs;
}

double floor_ms(const ClassCost& cost, const Ceilings& ceilings) {
  return 1e3 * std::max(cost.bytes / ceilings.copy_bytes_per_s, cost.flops / ceilings.bf16_flops_per_s);
}

}  // namespace moeserve::bench_cuda

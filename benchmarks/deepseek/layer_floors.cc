#include "layer_floors.h"

#include <algorithm>
#include <cmath>

namespace moeserve::deepseek_bench {
namespace {

int64_t blocks(int64_t n, int64_t block) { return (n + block - 1) / block; }

// Elements of kv_b [heads x (qk_nope + v), kv_lora]: W_UK and W_UV of every head.
double kv_b_elements(const deepseek_v3::Config& c) {
  return static_cast<double>(c.num_heads) * c.kv_b_rows_per_head() * c.kv_lora_rank;
}

}  // namespace

double LayerStep::query_key_pairs() const {
  // Token i (0-based) of a sequence sees context + i + 1 keys.
  const double t = static_cast<double>(tokens);
  return static_cast<double>(sequences) * (t * static_cast<double>(context) + t * (t + 1) / 2);
}

int64_t fp8_matrix_bytes(const deepseek_v3::Config& c, int64_t rows, int64_t cols) {
  return rows * cols + blocks(rows, c.fp8_block_rows) * blocks(cols, c.fp8_block_cols) * 4;
}

int64_t mla_shared_projection_bytes(const deepseek_v3::Config& c) {
  const int64_t H = c.hidden_size;
  const int64_t q = c.q_lora_rank > 0 ? fp8_matrix_bytes(c, c.q_lora_rank, H) : 0;
  return q + fp8_matrix_bytes(c, c.kv_a_rows(), H);
}

int64_t mla_head_projection_bytes(const deepseek_v3::Config& c) {
  const int64_t H = c.hidden_size, heads = c.num_heads;
  const int64_t q_in = c.q_lora_rank > 0 ? c.q_lora_rank : H;  // q_b, or a plain q_proj
  return fp8_matrix_bytes(c, heads * c.qk_head_dim(), q_in) +
         fp8_matrix_bytes(c, heads * c.kv_b_rows_per_head(), c.kv_lora_rank) +
         fp8_matrix_bytes(c, H, heads * c.v_head_dim);
}

int64_t expert_bytes(const deepseek_v3::Config& c) {
  const int64_t H = c.hidden_size, I = c.moe_intermediate_size;
  return 2 * fp8_matrix_bytes(c, I, H) + fp8_matrix_bytes(c, H, I);
}

int64_t router_bytes(const deepseek_v3::Config& c) {
  return static_cast<int64_t>(c.n_routed_experts) * c.hidden_size * 2 + static_cast<int64_t>(c.n_routed_experts) * 4;
}

int64_t dense_mlp_bytes(const deepseek_v3::Config& c) {
  const int64_t H = c.hidden_size, I = c.intermediate_size;
  return 2 * fp8_matrix_bytes(c, I, H) + fp8_matrix_bytes(c, H, I);
}

int64_t lm_head_bytes(const deepseek_v3::Config& c) { return static_cast<int64_t>(c.vocab_size) * c.hidden_size * 2; }

double expected_touched_experts(double experts, double top_k, double tokens) {
  return experts * (1.0 - std::pow(1.0 - top_k / experts, tokens));
}

double latent_kv_bytes(const deepseek_v3::Config& c, const LayerStep& step, int kv_element_bytes) {
  const double rows = static_cast<double>(step.sequences) * static_cast<double>(step.context + step.tokens);
  return rows * c.latent_width() * kv_element_bytes;
}

double attention_projection_flops(const deepseek_v3::Config& c, double tokens) {
  const double H = c.hidden_size, heads = c.num_heads;
  const double q =
      c.q_lora_rank > 0 ? c.q_lora_rank * H + heads * c.qk_head_dim() * c.q_lora_rank : heads * c.qk_head_dim() * H;
  return 2 * tokens * (q + c.kv_a_rows() * H + H * heads * c.v_head_dim);
}

double mla_absorbed_flops(const deepseek_v3::Config& c, const LayerStep& step) {
  const double per_pair = 2.0 * c.num_heads * (c.latent_width() + c.kv_lora_rank);
  return 2 * static_cast<double>(step.total_tokens()) * kv_b_elements(c) + step.query_key_pairs() * per_pair;
}

double mla_expanded_flops(const deepseek_v3::Config& c, const LayerStep& step) {
  const double keys = static_cast<double>(step.sequences) * static_cast<double>(step.context + step.tokens);
  const double per_pair = 2.0 * c.num_heads * (c.qk_head_dim() + c.v_head_dim);
  return 2 * keys * kv_b_elements(c) + step.query_key_pairs() * per_pair;
}

double attention_core_flops(const deepseek_v3::Config& c, const LayerStep& step) {
  return std::min(mla_absorbed_flops(c, step), mla_expanded_flops(c, step));
}

double moe_flops(const deepseek_v3::Config& c, double tokens) {
  const double H = c.hidden_size, I = c.moe_intermediate_size;
  const double experts_per_token = c.num_experts_per_tok + std::max(c.n_shared_experts, 0);
  return 2 * tokens * (c.n_routed_experts * H + experts_per_token * 3 * I * H);
}

double dense_mlp_flops(const deepseek_v3::Config& c, double tokens) {
  return 2 * tokens * 3.0 * c.intermediate_size * c.hidden_size;
}

double lm_head_flops(const deepseek_v3::Config& c, double rows) {
  return 2 * rows * static_cast<double>(c.vocab_size) * c.hidden_size;
}

namespace {

LayerFloor attention_floor(const deepseek_v3::Config& c, const LayerStep& step, int kv_element_bytes) {
  LayerFloor f;
  f.attention_weight_bytes = static_cast<double>(attention_weight_bytes(c));
  f.latent_kv_bytes = latent_kv_bytes(c, step, kv_element_bytes);
  f.gemm_flops = attention_projection_flops(c, static_cast<double>(step.total_tokens()));
  f.attention_core_flops = attention_core_flops(c, step);
  return f;
}

}  // namespace

LayerFloor moe_layer_floor(const deepseek_v3::Config& c, const LayerStep& step, double touched_experts,
                           int kv_element_bytes) {
  LayerFloor f = attention_floor(c, step, kv_element_bytes);
  f.router_bytes = static_cast<double>(router_bytes(c));
  f.shared_expert_bytes = static_cast<double>(std::max(c.n_shared_experts, 0)) * expert_bytes(c);
  f.touched_experts = touched_experts;
  f.routed_expert_bytes = touched_experts * static_cast<double>(expert_bytes(c));
  f.gemm_flops += moe_flops(c, static_cast<double>(step.total_tokens()));
  return f;
}

LayerFloor dense_layer_floor(const deepseek_v3::Config& c, const LayerStep& step, int kv_element_bytes) {
  LayerFloor f = attention_floor(c, step, kv_element_bytes);
  f.dense_mlp_bytes = static_cast<double>(dense_mlp_bytes(c));
  f.gemm_flops += dense_mlp_flops(c, static_cast<double>(step.total_tokens()));
  return f;
}

double ClassFloor::seconds(double copy_bytes_per_s, double fp8_flops_per_s, double bf16_flops_per_s) const {
  return std::max(bytes / copy_bytes_per_s, fp8_flops / fp8_flops_per_s + bf16_flops / bf16_flops_per_s);
}

LayerClassFloors layer_class_floors(const deepseek_v3::Config& c, const LayerStep& step, bool moe,
                                    double touched_experts, int kv_element_bytes, bool expanded) {
  const double T = static_cast<double>(step.total_tokens()), H = c.hidden_size, heads = c.num_heads;
  const double row_bytes = static_cast<double>(c.latent_width()) * kv_element_bytes;
  const double context_rows = static_cast<double>(step.sequences) * static_cast<double>(step.context);
  LayerClassFloors f;
  const double q_in = c.q_lora_rank > 0 ? c.q_lora_rank : H;
  f.qkv_projection.bytes = static_cast<double>(mla_shared_projection_bytes(c) +
                                               fp8_matrix_bytes(c, c.num_heads * c.qk_head_dim(), q_in));
  f.qkv_projection.fp8_flops = attention_projection_flops(c, T) - 2 * T * H * heads * c.v_head_dim;
  f.output_projection.bytes = static_cast<double>(fp8_matrix_bytes(c, c.hidden_size, c.num_heads * c.v_head_dim));
  f.output_projection.fp8_flops = 2 * T * H * heads * c.v_head_dim;
  f.kv_write.bytes = T * row_bytes;
  const double kv_b_bytes =
      static_cast<double>(fp8_matrix_bytes(c, c.num_heads * c.kv_b_rows_per_head(), c.kv_lora_rank));
  ClassFloor& core = expanded ? f.latent_expansion : f.attention_decode;
  core.bytes = kv_b_bytes + context_rows * row_bytes;
  if (expanded) {
    const double pairs = 2.0 * heads * (c.qk_head_dim() + c.v_head_dim) * step.query_key_pairs();
    f.attention_prefill.bf16_flops = pairs;
    f.latent_expansion.bf16_flops = mla_expanded_flops(c, step) - pairs;
  } else {
    f.attention_decode.bf16_flops = mla_absorbed_flops(c, step);
  }
  const double I = c.moe_intermediate_size;
  if (moe) {
    f.router.bytes = static_cast<double>(router_bytes(c));
    f.router.bf16_flops = 2 * T * c.n_routed_experts * H;
    f.experts_gate_up.bytes = touched_experts * 2 * static_cast<double>(fp8_matrix_bytes(c, c.moe_intermediate_size,
                                                                                        c.hidden_size));
    f.experts_gate_up.fp8_flops = 2 * T * c.num_experts_per_tok * 2 * I * H;
    f.experts_down.bytes = touched_experts * static_cast<double>(fp8_matrix_bytes(c, c.hidden_size,
                                                                                 c.moe_intermediate_size));
    f.experts_down.fp8_flops = 2 * T * c.num_experts_per_tok * I * H;
    const double shared = std::max(c.n_shared_experts, 0);
    f.mlp.bytes = shared * static_cast<double>(expert_bytes(c));
    f.mlp.fp8_flops = 2 * T * shared * 3 * I * H;
  } else {
    f.mlp.bytes = static_cast<double>(dense_mlp_bytes(c));
    f.mlp.fp8_flops = dense_mlp_flops(c, T);
  }
  return f;
}

double byte_floor_seconds(const LayerFloor& f, double copy_bytes_per_s) { return f.bytes() / copy_bytes_per_s; }

double flop_floor_seconds(const LayerFloor& f, double fp8_flops_per_s, double bf16_flops_per_s) {
  return f.gemm_flops / fp8_flops_per_s + f.attention_core_flops / bf16_flops_per_s;
}

}  // namespace moeserve::deepseek_bench

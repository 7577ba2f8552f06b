#include "model/deepseek_v3/shapes.h"

#include "util/error.h"

namespace moeserve::deepseek_v3 {

void apply_known_shape(const std::string& name, Config& c) {
  MOESERVE_CHECK(name == "deepseek-r1", "unknown shape \"{}\" for the DeepSeek-V3 family (deepseek-r1)", name);
  c.hidden_size = 7168;
  c.intermediate_size = 18432;
  c.moe_intermediate_size = 2048;
  c.num_heads = 128;
  c.q_lora_rank = 1536;
  c.kv_lora_rank = 512;
  c.qk_nope_head_dim = 128;
  c.qk_rope_head_dim = 64;
  c.v_head_dim = 128;
  c.n_routed_experts = 256;
  c.num_experts_per_tok = 8;
  c.n_group = 8;
  c.topk_group = 4;
}

}  // namespace moeserve::deepseek_v3

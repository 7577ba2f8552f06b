#include "model/gpt_oss/shapes.h"

#include "util/error.h"

namespace moeserve::gpt_oss {

void apply_known_shape(const std::string& name, ModelConfig& c) {
  MOESERVE_CHECK(name == "gpt-oss-20b" || name == "gpt-oss-120b", "unknown shape \"{}\" (gpt-oss-20b or gpt-oss-120b)",
                 name);
  c.num_layers = name == "gpt-oss-20b" ? 24 : 36;
  c.num_experts = name == "gpt-oss-20b" ? 32 : 128;
  c.hidden_size = 2880;
  c.num_heads = 64;
  c.num_kv_heads = 8;
  c.head_dim = 64;
  c.experts_per_token = 4;
  c.intermediate_size = 2880;
  c.vocab_size = 201088;
  c.sliding_window = 128;
}

}  // namespace moeserve::gpt_oss

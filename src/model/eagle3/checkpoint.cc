#include "model/eagle3/checkpoint.h"

#include <cstring>

#include "model/tensor_binder.h"
#include "util/error.h"

namespace moeserve::speculative {

std::unique_ptr<Eagle3Checkpoint> Eagle3Checkpoint::open(const std::string& dir, const ModelConfig& target) {
  Eagle3Config config = load_eagle3_config(dir, target.num_layers);
  TensorStore store = TensorStore::open_directory(dir);
  std::unique_ptr<Eagle3Checkpoint> checkpoint(new Eagle3Checkpoint(std::move(config), std::move(store)));
  checkpoint->bind(target);
  return checkpoint;
}

void Eagle3Checkpoint::bind(const ModelConfig& target) {
  const Eagle3Config& c = config_;
  const std::string& dir = store_.directory();
  MOESERVE_CHECK(c.vocab_size == target.vocab_size, "{}/config.json: \"vocab_size\" {} differs from the target's {}",
                 dir, c.vocab_size, target.vocab_size);
  MOESERVE_CHECK(c.target_hidden_size == target.hidden_size,
                 "{}/config.json: target features are {} wide (\"target_hidden_size\"), the target's hidden size is {}",
                 dir, c.target_hidden_size, target.hidden_size);

  TensorBinder binder(store_);
  const int64_t H = c.hidden_size, Q = c.q_dim(), KV = c.kv_dim(), I = c.intermediate_size, F = c.feature_width();
  // ModelOpt 2025 exports the layer as midlayer.*, 2026 as layers.0.* (vLLM maps the first to the second).
  const bool midlayer = binder.has("midlayer.self_attn.q_proj.weight");
  MOESERVE_CHECK(midlayer || binder.has("layers.0.self_attn.q_proj.weight"),
                 "{}: neither midlayer.self_attn.q_proj.weight nor layers.0.self_attn.q_proj.weight is present", dir);
  layer_prefix_ = midlayer ? "midlayer." : "layers.0.";
  const std::string& p = layer_prefix_;

  Eagle3Weights& w = weights_;
  w.fc = binder.matrix("fc.weight", H, F);
  if (c.norm_before_fc) {
    MOESERVE_CHECK(binder.has("input_norm.weight"), "{}: config.json asks for norm_before_fc but input_norm.weight "
                   "is absent", dir);
    w.input_norm = binder.vector("input_norm.weight", F);
  }
  w.hidden_norm = binder.vector(p + "hidden_norm.weight", H);
  w.input_layernorm = binder.vector(p + "input_layernorm.weight", H);
  w.post_attention_layernorm = binder.vector(p + "post_attention_layernorm.weight", H);
  w.q = binder.matrix(p + "self_attn.q_proj.weight", Q, 2 * H);
  w.k = binder.matrix(p + "self_attn.k_proj.weight", KV, 2 * H);
  w.v = binder.matrix(p + "self_attn.v_proj.weight", KV, 2 * H);
  w.o = binder.matrix(p + "self_attn.o_proj.weight", H, Q);
  w.gate = binder.matrix(p + "mlp.gate_proj.weight", I, H);
  w.up = binder.matrix(p + "mlp.up_proj.weight", I, H);
  w.down = binder.matrix(p + "mlp.down_proj.weight", H, I);
  w.final_norm = binder.vector("norm.weight", H);

  if (binder.has("lm_head.weight")) {
    w.lm_head = binder.matrix("lm_head.weight", c.draft_vocab_size, H);
  } else {
    MOESERVE_CHECK(c.draft_vocab_size == target.vocab_size && H == target.hidden_size,
                   "{}: no lm_head.weight, and the target's unembedding [{}, {}] cannot stand in for a [{}, {}] head",
                   dir, target.vocab_size, target.hidden_size, c.draft_vocab_size, H);
  }
  if (binder.has("embed_tokens.weight")) {
    w.embed_tokens = binder.matrix("embed_tokens.weight", c.vocab_size, H);
  } else {
    MOESERVE_CHECK(H == target.hidden_size,
                   "{}: no embed_tokens.weight, and the target's embedding is {} wide, the draft's hidden size {}", dir,
                   target.hidden_size, H);
  }
  if (binder.has("d2t")) {
    const TensorView& d2t = binder.tensor("d2t", {c.draft_vocab_size}, {DType::I64});
    w.d2t.resize(c.draft_vocab_size);
    std::memcpy(w.d2t.data(), d2t.bytes.data(), d2t.bytes.size());
    // Offsets compared before they are added: a hostile one (INT64_MAX) must not overflow the sum.
    for (int64_t id = 0; id < c.draft_vocab_size; ++id)
      MOESERVE_CHECK(w.d2t[id] >= -id && w.d2t[id] < c.vocab_size - id,
                     "{}: maps draft id {} to {}, outside the vocabulary of {}", d2t.describe(), id,
                     static_cast<__int128>(id) + w.d2t[id], c.vocab_size);
  } else {
    MOESERVE_CHECK(c.draft_vocab_size == c.vocab_size,
                   "{}: \"draft_vocab_size\" {} is smaller than \"vocab_size\" {} but there is no d2t table", dir,
                   c.draft_vocab_size, c.vocab_size);
  }
  // t2d (SpecForge exports it): the training-time membership mask of the draft vocabulary; checked, not used.
  if (binder.has("t2d")) {
    const TensorView& t2d = binder.tensor("t2d", {c.vocab_size}, {DType::BOOL});
    int64_t members = 0;
    for (uint8_t b : t2d.bytes) members += b != 0;
    MOESERVE_CHECK(members == c.draft_vocab_size, "{}: marks {} tokens, the draft vocabulary has {}", t2d.describe(),
                   members, c.draft_vocab_size);
    for (int64_t id = 0; id < c.draft_vocab_size; ++id) {
      const int64_t target_id = w.d2t.empty() ? id : id + w.d2t[id];
      MOESERVE_CHECK(t2d.bytes[target_id] != 0, "{}: does not mark token {}, which d2t maps draft id {} to",
                     t2d.describe(), target_id, id);
    }
  }
  binder.check_all_used("an EAGLE-3 draft head");
}

}  // namespace moeserve::speculative

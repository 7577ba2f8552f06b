#include "runner/cpu/mtp_drafter.h"

#include <unordered_map>

#include "runner/cpu/deepseek_v3_ffn.h"
#include "runner/cpu/deepseek_v3_ops.h"
#include "runner/cpu/ops.h"
#include "runner/eagle3_tree.h"
#include "util/error.h"

namespace moeserve::speculative {
namespace {

const deepseek_v3::Mtp& mtp_of(const deepseek_v3::Checkpoint& checkpoint) {
  MOESERVE_CHECK(checkpoint.has_mtp(), "{}: no MTP layer (model.layers.{}.*) to draft with", checkpoint.directory(),
                 checkpoint.config().num_layers);
  return *checkpoint.weights().mtp;
}

}  // namespace

size_t MtpDrafter::kv_block_bytes(const deepseek_v3::Config& config, int block_size) {
  return static_cast<size_t>(block_size) * config.latent_width() * sizeof(float);
}

MtpDrafter::MtpDrafter(std::shared_ptr<const deepseek_v3::Checkpoint> checkpoint, MtpDrafterOptions options)
    : TreeDrafter("MTP drafter", options.block_size, options.num_blocks, checkpoint->config().latent_width()),
      checkpoint_(std::move(checkpoint)),
      mtp_(mtp_of(*checkpoint_)),
      pool_(options.threads),
      attention_(checkpoint_->config(), options.form) {}

void MtpDrafter::fuse_features(const float* features, int64_t n, float* g) {
  const deepseek_v3::Config& c = checkpoint_->config();
  cpu::rms_norm(features, checkpoint_->weights().final_norm.data(), n, c.hidden_size, c.rms_norm_eps, g);
}

void MtpDrafter::forward_rows(const std::vector<Row>& rows, const float* g, float* h) {
  const deepseek_v3::Config& c = checkpoint_->config();
  const int64_t R = static_cast<int64_t>(rows.size()), H = c.hidden_size;
  const double eps = c.rms_norm_eps;
  // z = eh_proj([enorm(embedding); hnorm(g)]).
  std::vector<float> both(R * 2 * H), embedded(H), z(R * H), normed(R * H), delta(R * H);
  for (int64_t r = 0; r < R; ++r) {
    for (int64_t i = 0; i < H; ++i) embedded[i] = mtp_.embedding.at(rows[r].token, i);
    cpu::rms_norm(embedded.data(), mtp_.enorm.data(), 1, H, eps, both.data() + r * 2 * H);
    cpu::rms_norm(g + r * H, mtp_.hnorm.data(), 1, H, eps, both.data() + r * 2 * H + H);
  }
  cpu::linear(pool_, both.data(), R, mtp_.eh_proj, z.data());

  // Attention over the module's own latents: a key set per sequence holding its slots [0, the highest a row uses].
  std::unordered_map<const SequenceKv*, int32_t> set_of;
  std::vector<cpu::MlaKeySet> key_sets;
  std::vector<int32_t> last_slot;
  for (const Row& row : rows) {
    auto [it, added] = set_of.emplace(row.kv, static_cast<int32_t>(key_sets.size()));
    if (added) {
      key_sets.emplace_back();
      last_slot.push_back(-1);
    }
    last_slot[it->second] = std::max({last_slot[it->second], row.slot, row.prefix - 1});
  }
  for (const auto& [kv, set] : set_of)
    for (int32_t slot = 0; slot <= last_slot[set]; ++slot) key_sets[set].latents.push_back(kv_slot(*kv, slot));
  std::vector<cpu::MlaQuery> queries(R);
  for (int64_t r = 0; r < R; ++r) {
    const Row& row = rows[r];
    cpu::MlaQuery& q = queries[r];
    q.position = row.position;
    q.latent = kv_slot(*row.kv, row.slot);
    q.key_set = set_of.at(row.kv);
    for (int32_t slot = 0; slot < row.prefix; ++slot) q.visible.push_back(slot);
    q.visible.insert(q.visible.end(), row.extra.begin(), row.extra.end());
  }
  const deepseek_v3::Layer& layer = mtp_.layer;
  cpu::rms_norm(z.data(), layer.input_norm.data(), R, H, eps, normed.data());
  attention_.forward(pool_, layer.attention, normed.data(), queries, key_sets, delta.data());
  for (int64_t i = 0; i < R * H; ++i) z[i] += delta[i];
  cpu::rms_norm(z.data(), layer.post_attention_norm.data(), R, H, eps, normed.data());
  cpu::feed_forward(pool_, c, layer, normed.data(), R, delta.data());
  for (int64_t i = 0; i < R * H; ++i) z[i] += delta[i];
  cpu::rms_norm(z.data(), mtp_.head_norm.data(), R, H, eps, h);
}

void MtpDrafter::logits(const float* h, int64_t R, std::vector<float>& out) {
  out.resize(R * checkpoint_->config().vocab_size);
  cpu::linear(pool_, h, R, mtp_.head, nullptr, out.data());
}

void MtpDrafter::draft_log_probs(const float* h, int64_t R, std::vector<float>& out) {
  logits(h, R, out);
  const size_t V = draft_vocab();
  for (int64_t r = 0; r < R; ++r) log_softmax({out.data() + r * V, V});
}

std::vector<float> MtpDrafter::extend_logits(std::span<const DraftInput> inputs) {
  std::vector<int64_t> last_row;
  const std::vector<float> h = extend(inputs, last_row);
  std::vector<float> out;
  logits(h.data(), static_cast<int64_t>(h.size()) / state_width(), out);
  return out;
}

}  // namespace moeserve::speculative

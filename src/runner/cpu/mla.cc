#include "runner/cpu/mla.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "runner/cpu/deepseek_v3_ops.h"
#include "runner/cpu/dot.h"
#include "runner/cpu/ops.h"

namespace moeserve::cpu {
namespace {

// q_a_layernorm and kv_a_layernorm keep RMSNorm's default epsilon in both references (transformers builds them
// without config.rms_norm_eps; DeepSeek's RMSNorm defaults to 1e-6).
constexpr double kLatentNormEps = 1e-6;

// The scores become their softmax weights (fp32, max subtracted).
void softmax_in_place(std::vector<float>& scores) {
  float m = -std::numeric_limits<float>::infinity();
  for (float s : scores) m = std::max(m, s);
  float sum = 0.0f;
  for (float& s : scores) {
    s = std::exp(s - m);
    sum += s;
  }
  const float inv = 1.0f / sum;
  for (float& s : scores) s *= inv;
}

}  // namespace

MlaAttention::MlaAttention(const deepseek_v3::Config& config, MlaForm form)
    : c_(config),
      form_(form),
      inv_freq_(config.rope_inverse_frequencies()),
      rope_factor_(config.rope_attention_factor()),
      scale_(config.softmax_scale()) {}

void MlaAttention::forward(ThreadPool& pool, const deepseek_v3::Attention& w, const float* x,
                           std::span<const MlaQuery> queries, std::span<const MlaKeySet> key_sets, float* out) {
  const int64_t R = static_cast<int64_t>(queries.size());
  const int64_t heads = c_.num_heads, qk = c_.qk_head_dim(), L = c_.kv_lora_rank, rope = c_.qk_rope_head_dim;
  std::vector<float> q(R * heads * qk);
  if (c_.q_lora_rank > 0) {
    std::vector<float> qa(R * c_.q_lora_rank);
    linear(pool, x, R, w.q_a, qa.data());
    rms_norm(qa.data(), w.q_a_norm.data(), R, c_.q_lora_rank, kLatentNormEps, qa.data());
    linear(pool, qa.data(), R, w.q_b, q.data());
  } else {
    linear(pool, x, R, w.q, q.data());
  }
  std::vector<float> kva(R * (L + rope));
  linear(pool, x, R, w.kv_a, kva.data());
  for (int64_t r = 0; r < R; ++r) {
    const int32_t position = queries[r].position;
    rope_adjacent_pairs(q.data() + r * heads * qk + c_.qk_nope_head_dim, static_cast<int>(heads), qk,
                        static_cast<int>(rope), position, inv_freq_, rope_factor_);
    float* latent = queries[r].latent;
    rms_norm(kva.data() + r * (L + rope), w.kv_a_norm.data(), 1, L, kLatentNormEps, latent);
    std::copy_n(kva.data() + r * (L + rope) + L, rope, latent + L);
    rope_adjacent_pairs(latent + L, 1, rope, static_cast<int>(rope), position, inv_freq_, rope_factor_);
  }
  std::vector<float> o(R * heads * c_.v_head_dim);
  if (form_ == MlaForm::naive)
    attend_naive(pool, w, q.data(), queries, key_sets, o.data());
  else
    attend_absorbed(pool, w, q.data(), queries, key_sets, o.data());
  linear(pool, o.data(), R, w.o, out);
}

void MlaAttention::attend_naive(ThreadPool& pool, const deepseek_v3::Attention& w, const float* q,
                                std::span<const MlaQuery> queries, std::span<const MlaKeySet> key_sets, float* o) {
  const int64_t heads = c_.num_heads, qk = c_.qk_head_dim(), nope = c_.qk_nope_head_dim, rope = c_.qk_rope_head_dim,
                v = c_.v_head_dim, L = c_.kv_lora_rank, per_head = c_.kv_b_rows_per_head();
  // Every visible latent's keys and values, expanded once per key set: [n, heads * (nope + v)].
  std::vector<std::vector<float>> expanded(key_sets.size());
  std::vector<float> gathered;
  for (size_t s = 0; s < key_sets.size(); ++s) {
    const int64_t n = static_cast<int64_t>(key_sets[s].latents.size());
    gathered.resize(n * L);
    for (int64_t j = 0; j < n; ++j) std::copy_n(key_sets[s].latents[j], L, gathered.data() + j * L);
    expanded[s].resize(n * heads * per_head);
    linear(pool, gathered.data(), n, w.kv_b, expanded[s].data());
  }
  const int64_t R = static_cast<int64_t>(queries.size());
  pool.parallel_for(R * heads, 1, [&](size_t begin, size_t end) {
    thread_local std::vector<float> scores;
    for (size_t item = begin; item < end; ++item) {
      const int64_t r = static_cast<int64_t>(item) / heads, h = static_cast<int64_t>(item) % heads;
      const MlaQuery& query = queries[r];
      const MlaKeySet& set = key_sets[query.key_set];
      const float* kv = expanded[query.key_set].data();
      const float* q_nope = q + (r * heads + h) * qk;
      const float* q_pe = q_nope + nope;
      scores.resize(query.visible.size());
      for (size_t i = 0; i < query.visible.size(); ++i) {
        const int32_t j = query.visible[i];
        const float* k_nope = kv + (j * heads + h) * per_head;
        scores[i] = (dot_f32(q_nope, k_nope, nope) + dot_f32(q_pe, set.latents[j] + L, rope)) * scale_;
      }
      softmax_in_place(scores);
      float* out = o + (r * heads + h) * v;
      std::fill(out, out + v, 0.0f);
      for (size_t i = 0; i < query.visible.size(); ++i) {
        const float* value = kv + (query.visible[i] * heads + h) * per_head + nope;
        for (int64_t e = 0; e < v; ++e) out[e] = std::fma(scores[i], value[e], out[e]);
      }
    }
  });
}

void MlaAttention::attend_absorbed(ThreadPool& pool, const deepseek_v3::Attention& w, const float* q,
                                   std::span<const MlaQuery> queries, std::span<const MlaKeySet> key_sets, float* o) {
  const int64_t heads = c_.num_heads, qk = c_.qk_head_dim(), nope = c_.qk_nope_head_dim, rope = c_.qk_rope_head_dim,
                v = c_.v_head_dim, L = c_.kv_lora_rank, per_head = c_.kv_b_rows_per_head();
  const int64_t R = static_cast<int64_t>(queries.size());
  pool.parallel_for(R * heads, 1, [&](size_t begin, size_t end) {
    thread_local std::vector<float> scores, absorbed, latent_sum;
    for (size_t item = begin; item < end; ++item) {
      const int64_t r = static_cast<int64_t>(item) / heads, h = static_cast<int64_t>(item) % heads;
      const MlaQuery& query = queries[r];
      const MlaKeySet& set = key_sets[query.key_set];
      const float* q_nope = q + (r * heads + h) * qk;
      const float* q_pe = q_nope + nope;
      // q~ = W_UK^h^T q_nope: head h's key rows of kv_b, weighted by q_nope.
      absorbed.assign(L, 0.0f);
      for (int64_t d = 0; d < nope; ++d) add_scaled_row(w.kv_b, h * per_head + d, q_nope[d], absorbed.data());
      scores.resize(query.visible.size());
      for (size_t i = 0; i < query.visible.size(); ++i) {
        const float* latent = set.latents[query.visible[i]];
        scores[i] = (dot_f32(absorbed.data(), latent, L) + dot_f32(q_pe, latent + L, rope)) * scale_;
      }
      softmax_in_place(scores);
      latent_sum.assign(L, 0.0f);
      for (size_t i = 0; i < query.visible.size(); ++i) {
        const float* latent = set.latents[query.visible[i]];
        for (int64_t k = 0; k < L; ++k) latent_sum[k] = std::fma(scores[i], latent[k], latent_sum[k]);
      }
      // o_h = W_UV^h (sum p c): head h's value rows of kv_b.
      float* out = o + (r * heads + h) * v;
      for (int64_t e = 0; e < v; ++e) out[e] = row_dot(w.kv_b, h * per_head + nope + e, latent_sum.data());
    }
  });
}

}  // namespace moeserve::cpu

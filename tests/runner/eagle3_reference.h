// A plain re-computation of the EAGLE-3 draft layer for the tests (reference section 1.2): dense double loops
// over the weights read element by element, one token at a time, nothing shared with the drafter's kernels.
#pragma once

#include <cmath>
#include <numbers>
#include <vector>

#include "model/eagle3/checkpoint.h"

namespace moeserve::speculative::testing {

class ReferenceDraft {
 public:
  struct Kv {
    std::vector<double> k, v;
  };

  ReferenceDraft(const Eagle3Checkpoint& draft, const ModelWeights& target)
      : c_(draft.config()), w_(draft.weights()) {
    embedding_ = w_.embed_tokens ? *w_.embed_tokens : target.embedding;
    lm_head_ = w_.lm_head ? *w_.lm_head : target.unembedding;
    // Llama 3.1 RoPE frequencies in double.
    for (int i = 0; i < c_.head_dim / 2; ++i) {
      double f = std::pow(c_.rope.theta, -2.0 * i / c_.head_dim);
      if (c_.rope.scaling == LlamaRope::Scaling::llama3) {
        const double wavelen = 2 * std::numbers::pi / f, old = static_cast<double>(c_.rope.original_max_position);
        if (wavelen > old / c_.rope.low_freq_factor) {
          f /= c_.rope.factor;
        } else if (wavelen >= old / c_.rope.high_freq_factor) {
          const double s =
              (old / wavelen - c_.rope.low_freq_factor) / (c_.rope.high_freq_factor - c_.rope.low_freq_factor);
          f = (1 - s) * f / c_.rope.factor + s * f;
        }
      }
      inv_freq_.push_back(f);
    }
  }

  // Target features [feature_width] -> g [hidden].
  std::vector<double> fuse(const float* features) const {
    std::vector<double> x(features, features + c_.feature_width());
    if (c_.norm_before_fc) x = rms(x, w_.input_norm);
    return times(w_.fc, x);
  }

  // One draft row: input g, the embedded token, its RoPE position; attends to `cache` plus itself (appended).
  std::vector<double> layer(const std::vector<double>& g, int token, int position, std::vector<Kv>& cache) const {
    const int H = c_.hidden_size, D = c_.head_dim;
    std::vector<double> e(H);
    for (int i = 0; i < H; ++i) e[i] = embedding_.at(token, i);
    std::vector<double> attn_in = rms(e, w_.input_layernorm);
    const std::vector<double> xh = rms(g, w_.hidden_norm);
    attn_in.insert(attn_in.end(), xh.begin(), xh.end());
    std::vector<double> q = times(w_.q, attn_in), k = times(w_.k, attn_in), v = times(w_.v, attn_in);
    rope(q, position);
    rope(k, position);
    cache.push_back({k, v});
    std::vector<double> attn(c_.q_dim());
    for (int h = 0; h < c_.num_heads; ++h) {
      const int kvh = h / c_.heads_per_kv();
      std::vector<double> s;
      for (const Kv& kv : cache) {
        double dot = 0;
        for (int d = 0; d < D; ++d) dot += q[h * D + d] * kv.k[kvh * D + d];
        s.push_back(dot / std::sqrt(static_cast<double>(D)));
      }
      double m = s[0], sum = 0;
      for (double x : s) m = std::max(m, x);
      for (double& x : s) sum += (x = std::exp(x - m));
      for (size_t j = 0; j < cache.size(); ++j)
        for (int d = 0; d < D; ++d) attn[h * D + d] += s[j] / sum * cache[j].v[kvh * D + d];
    }
    std::vector<double> h1 = c_.norm_before_residual ? xh : g;
    const std::vector<double> o = times(w_.o, attn);
    for (int i = 0; i < H; ++i) h1[i] += o[i];
    const std::vector<double> x = rms(h1, w_.post_attention_layernorm);
    std::vector<double> gate = times(w_.gate, x), up = times(w_.up, x);
    for (size_t i = 0; i < gate.size(); ++i) gate[i] = gate[i] / (1 + std::exp(-gate[i])) * up[i];
    std::vector<double> h2 = times(w_.down, gate);
    for (int i = 0; i < H; ++i) h2[i] += h1[i];
    return h2;
  }

  // log_softmax(lm_head(norm(h2))) over the draft vocabulary.
  std::vector<double> log_probs(const std::vector<double>& h2) const {
    std::vector<double> logits = times(lm_head_, rms(h2, w_.final_norm));
    double m = logits[0], sum = 0;
    for (double x : logits) m = std::max(m, x);
    for (double x : logits) sum += std::exp(x - m);
    for (double& x : logits) x -= m + std::log(sum);
    return logits;
  }

  int to_target(int draft_id) const {
    return w_.d2t.empty() ? draft_id : static_cast<int>(draft_id + w_.d2t[draft_id]);
  }
  int to_draft(int target_id) const {
    for (int id = 0; id < c_.draft_vocab_size; ++id)
      if (to_target(id) == target_id) return id;
    return -1;
  }

 private:
  static std::vector<double> times(const Matrix& W, const std::vector<double>& x) {
    std::vector<double> y(W.rows);
    for (int64_t r = 0; r < W.rows; ++r)
      for (int64_t k = 0; k < W.cols; ++k) y[r] += W.at(r, k) * x[k];
    return y;
  }
  std::vector<double> rms(const std::vector<double>& x, const std::vector<float>& scale) const {
    double ss = 0;
    for (double v : x) ss += v * v;
    const double inv = 1 / std::sqrt(ss / x.size() + c_.rms_norm_eps);
    std::vector<double> y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * inv * scale[i];
    return y;
  }
  void rope(std::vector<double>& x, int position) const {
    const int D = c_.head_dim, half = D / 2;
    for (size_t h = 0; h < x.size() / D; ++h)
      for (int i = 0; i < half; ++i) {
        const double a = position * inv_freq_[i], x1 = x[h * D + i], x2 = x[h * D + i + half];
        x[h * D + i] = x1 * std::cos(a) - x2 * std::sin(a);
        x[h * D + i + half] = x2 * std::cos(a) + x1 * std::sin(a);
      }
  }

  const Eagle3Config& c_;
  const Eagle3Weights& w_;
  Matrix embedding_, lm_head_;
  std::vector<double> inv_freq_;
};

}  // namespace moeserve::speculative::testing

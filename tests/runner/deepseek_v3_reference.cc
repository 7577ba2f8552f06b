#include "runner/deepseek_v3_reference.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace moeserve::testing {
namespace {

using deepseek_v3::Config;
using deepseek_v3::Layer;
using deepseek_v3::Linear;
using Vec = std::vector<double>;

Vec matvec(const Linear& w, const Vec& x) {
  Vec y(w.rows(), 0.0);
  for (int64_t r = 0; r < w.rows(); ++r)
    for (int64_t c = 0; c < w.cols(); ++c) y[r] += static_cast<double>(w.at(r, c)) * x[c];
  return y;
}

Vec matvec(const Matrix& w, const Vec& x) {
  Vec y(w.rows, 0.0);
  for (int64_t r = 0; r < w.rows; ++r)
    for (int64_t c = 0; c < w.cols; ++c) y[r] += static_cast<double>(w.at(r, c)) * x[c];
  return y;
}

Vec rms_norm(const Vec& x, const std::vector<float>& weight, double eps) {
  double mean = 0;
  for (double v : x) mean += v * v;
  mean /= static_cast<double>(x.size());
  Vec y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = weight[i] * (x[i] / std::sqrt(mean + eps));
  return y;
}

Vec slice(const Vec& x, size_t begin, size_t n) { return Vec(x.begin() + begin, x.begin() + begin + n); }

// transformers' inv_freq and attention_scaling, recomputed: YaRN with DeepSeek's mscale keys.
struct Rope {
  Vec inv_freq;
  double scaling = 1.0;
  explicit Rope(const Config& c) {
    const int dim = c.qk_rope_head_dim;
    const auto& p = c.rope.yarn_params;
    auto get_mscale = [](double scale, double m) { return scale <= 1 ? 1.0 : 0.1 * m * std::log(scale) + 1.0; };
    auto correction = [&](double rotations) {
      return dim * std::log(p.original_max_position / (rotations * 2 * M_PI)) / (2 * std::log(p.theta));
    };
    const double low = std::max(std::floor(correction(p.beta_fast)), 0.0);
    double high = std::min(std::ceil(correction(p.beta_slow)), static_cast<double>(dim - 1));
    if (low == high) high += 0.001;
    for (int j = 0; j < dim / 2; ++j) {
      const double base = 1.0 / std::pow(p.theta, 2.0 * j / dim);
      const double ramp = std::clamp((j - low) / (high - low), 0.0, 1.0);
      inv_freq.push_back(c.rope.yarn ? base / p.factor * ramp + base * (1 - ramp) : base);
    }
    if (c.rope.yarn) scaling = get_mscale(p.factor, c.rope.mscale) / get_mscale(p.factor, c.rope.mscale_all_dim);
  }
  // apply_rotary_pos_emb_interleave: regroup to even values then odd ones, then q cos + rotate_half(q) sin with
  // cos = cat(freqs, freqs).
  Vec apply(const Vec& x, int position) const {
    const size_t half = x.size() / 2;
    Vec regrouped(x.size()), out(x.size());
    for (size_t j = 0; j < half; ++j) {
      regrouped[j] = x[2 * j];
      regrouped[half + j] = x[2 * j + 1];
    }
    for (size_t i = 0; i < x.size(); ++i) {
      const double angle = position * inv_freq[i % half];
      const double rotated = i < half ? -regrouped[i + half] : regrouped[i - half];
      out[i] = regrouped[i] * std::cos(angle) * scaling + rotated * std::sin(angle) * scaling;
    }
    return out;
  }
};

Vec mlp(const deepseek_v3::Mlp& m, const Vec& x) {
  const Vec g = matvec(m.gate, x), u = matvec(m.up, x);
  Vec h(g.size());
  for (size_t i = 0; i < g.size(); ++i) h[i] = g[i] / (1 + std::exp(-g[i])) * u[i];
  return matvec(m.down, h);
}

Vec moe(const Config& c, const Layer& l, const Vec& x) {
  const int E = c.n_routed_experts, G = c.n_group, per = E / G;
  const Vec logits = matvec(l.router, x);
  Vec scores(E), choice(E);
  for (int e = 0; e < E; ++e) {
    scores[e] = 1 / (1 + std::exp(-logits[e]));
    choice[e] = scores[e] + l.router_bias[e];
  }
  std::vector<std::pair<double, int>> groups;
  for (int g = 0; g < G; ++g) {
    Vec members(choice.begin() + g * per, choice.begin() + (g + 1) * per);
    std::sort(members.rbegin(), members.rend());
    groups.push_back({members[0] + members[1], g});
  }
  std::sort(groups.begin(), groups.end(), [](auto a, auto b) { return a.first > b.first || (a.first == b.first && a.second < b.second); });
  Vec masked(E, 0.0);
  for (int i = 0; i < c.topk_group; ++i)
    for (int e = groups[i].second * per; e < (groups[i].second + 1) * per; ++e) masked[e] = choice[e];
  std::vector<int> order(E);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return masked[a] > masked[b]; });
  double sum = 1e-20;
  for (int i = 0; i < c.num_experts_per_tok; ++i) sum += scores[order[i]];
  Vec out = l.shared ? mlp(*l.shared, x) : Vec(x.size(), 0.0);
  for (int i = 0; i < c.num_experts_per_tok; ++i) {
    const double w = scores[order[i]] / sum * c.routed_scaling_factor;
    const Vec y = mlp(l.experts[order[i]], x);
    for (size_t k = 0; k < x.size(); ++k) out[k] += w * y[k];
  }
  return out;
}

// One decoder layer over a causal run of rows at positions 0..n-1 (the residual stream, updated in place).
void decoder_layer(const Config& c, const Layer& l, const Rope& rope, Rows& x) {
  const size_t n = x.size();
  const int heads = c.num_heads, nope = c.qk_nope_head_dim, rd = c.qk_rope_head_dim, v = c.v_head_dim,
            L = c.kv_lora_rank;
  std::vector<Rows> q(n), k(n), values(n);
  for (size_t t = 0; t < n; ++t) {
    const Vec h = rms_norm(x[t], l.input_norm, c.rms_norm_eps);
    const Vec qs = c.q_lora_rank > 0 ? matvec(l.attention.q_b, rms_norm(matvec(l.attention.q_a, h), l.attention.q_a_norm, 1e-6))
                                     : matvec(l.attention.q, h);
    const Vec kva = matvec(l.attention.kv_a, h);
    const Vec kv = matvec(l.attention.kv_b, rms_norm(slice(kva, 0, L), l.attention.kv_a_norm, 1e-6));
    const Vec k_rot = rope.apply(slice(kva, L, rd), static_cast<int>(t));
    for (int hd = 0; hd < heads; ++hd) {
      Vec qh = slice(qs, hd * (nope + rd), nope), qr = rope.apply(slice(qs, hd * (nope + rd) + nope, rd), static_cast<int>(t));
      qh.insert(qh.end(), qr.begin(), qr.end());
      Vec kh = slice(kv, hd * (nope + v), nope);
      kh.insert(kh.end(), k_rot.begin(), k_rot.end());
      q[t].push_back(qh);
      k[t].push_back(kh);
      values[t].push_back(slice(kv, hd * (nope + v) + nope, v));
    }
  }
  const double scale = static_cast<double>(c.softmax_scale());
  for (size_t t = 0; t < n; ++t) {
    Vec attn;
    for (int hd = 0; hd < heads; ++hd) {
      Vec s(t + 1);
      for (size_t j = 0; j <= t; ++j) s[j] = std::inner_product(q[t][hd].begin(), q[t][hd].end(), k[j][hd].begin(), 0.0) * scale;
      const double m = *std::max_element(s.begin(), s.end());
      double total = 0;
      for (double& e : s) total += (e = std::exp(e - m));
      Vec o(v, 0.0);
      for (size_t j = 0; j <= t; ++j)
        for (int e = 0; e < v; ++e) o[e] += s[j] / total * values[j][hd][e];
      attn.insert(attn.end(), o.begin(), o.end());
    }
    const Vec out = matvec(l.attention.o, attn);
    for (size_t i = 0; i < out.size(); ++i) x[t][i] += out[i];
  }
  for (size_t t = 0; t < n; ++t) {
    const Vec h = rms_norm(x[t], l.post_attention_norm, c.rms_norm_eps);
    const Vec out = l.moe ? moe(c, l, h) : mlp(l.dense, h);
    for (size_t i = 0; i < out.size(); ++i) x[t][i] += out[i];
  }
}

Vec embed(const Matrix& embedding, int32_t token) {
  Vec e(embedding.cols);
  for (int64_t i = 0; i < embedding.cols; ++i) e[i] = embedding.at(token, i);
  return e;
}

}  // namespace

ReferenceOutput reference_forward(const deepseek_v3::Checkpoint& checkpoint, const std::vector<int32_t>& tokens) {
  const Config& c = checkpoint.config();
  const auto& w = checkpoint.weights();
  const Rope rope(c);
  Rows x;
  for (int32_t t : tokens) x.push_back(embed(w.embedding, t));
  for (const Layer& l : w.layers) decoder_layer(c, l, rope, x);
  ReferenceOutput out;
  for (const Vec& row : x) {
    out.hidden.push_back(rms_norm(row, w.final_norm, c.rms_norm_eps));
    out.logits.push_back(matvec(w.lm_head, out.hidden.back()));
  }
  return out;
}

Rows reference_mtp(const deepseek_v3::Checkpoint& checkpoint, const Rows& hidden, const std::vector<int32_t>& next_tokens,
                   Rows* out_hidden) {
  const Config& c = checkpoint.config();
  const deepseek_v3::Mtp& m = *checkpoint.weights().mtp;
  const Rope rope(c);
  Rows x;
  for (size_t i = 0; i < next_tokens.size(); ++i) {
    Vec both = rms_norm(embed(m.embedding, next_tokens[i]), m.enorm, c.rms_norm_eps);  // the embedding first
    const Vec h = rms_norm(hidden[i], m.hnorm, c.rms_norm_eps);
    both.insert(both.end(), h.begin(), h.end());
    x.push_back(matvec(m.eh_proj, both));
  }
  decoder_layer(c, m.layer, rope, x);
  Rows logits;
  if (out_hidden) out_hidden->clear();
  for (const Vec& row : x) {
    const Vec normed = rms_norm(row, m.head_norm, c.rms_norm_eps);
    if (out_hidden) out_hidden->push_back(normed);
    logits.push_back(matvec(m.head, normed));
  }
  return logits;
}

double worst_relative_error(const std::vector<float>& ours, int64_t rows, const Rows& reference) {
  double worst = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const size_t V = reference[r].size();
    double diff = 0, norm = 0;
    for (size_t j = 0; j < V; ++j) {
      diff += std::pow(ours[r * V + j] - reference[r][j], 2);
      norm += std::pow(reference[r][j], 2);
    }
    worst = std::max(worst, std::sqrt(diff / norm));
  }
  return worst;
}

}  // namespace moeserve::testing

#include "r1_projection.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "model/deepseek_v3/make_tiny.h"
#include "util/error.h"

namespace moeserve::deepseek_bench {
namespace {

// TensorRT-LLM on 8 x H200 (reference/serving-anchors.md §5: its Best_perf_practice_on_DeepSeek-R1 blog).
constexpr double kTrtBatch1TokensPerS = 158;
constexpr double kTrtOfflineTokensPerGpu = 1436;

std::string shape_name(const LayerStep& s) {
  return fmt::format("{} x {} tokens @ {}", s.sequences, s.tokens, s.context);
}

// The terms of one projection, appended as they are computed.
class Terms {
 public:
  double add(std::string name, double value, std::string unit, std::string formula) {
    terms_.push_back({std::move(name), std::move(formula), value, std::move(unit)});
    return value;
  }
  // A time: shown in microseconds, returned in seconds.
  double time(std::string name, double seconds, std::string formula) {
    add(std::move(name), seconds * 1e6, "us", std::move(formula));
    return seconds;
  }
  std::vector<Term> take() { return std::move(terms_); }

 private:
  std::vector<Term> terms_;
};

double us(double seconds) { return seconds * 1e6; }
double moe_layers(const deepseek_v3::Config& c) { return c.num_layers - c.first_k_dense_replace; }

}  // namespace

const MeasuredStep& Measurements::find(const LayerStep& shape) const {
  for (const MeasuredStep& m : steps)
    if (m.step.sequences == shape.sequences && m.step.tokens == shape.tokens && m.step.context == shape.context)
      return m;
  fail(
      "the projection needs the layer figures of {} (deepseek_layer_bench: decode batches --decode-batches "
      "at --context, verify steps --verify-tokens, prefill --prefill PROMPTSxLENGTH)",
      shape_name(shape));
}

Measurements measurements_from_json(const nlohmann::json& json, const std::string& where) {
  MOESERVE_CHECK(json.is_object() && json.contains("rows") && json["rows"].is_array(),
                 "{}: not deepseek_layer_bench's JSON (no \"rows\" array)", where);
  Measurements m;
  m.kv_element_bytes = json.value("kv_element_bytes", 2);
  m.copy_bytes_per_s = json.value("copy_tb_per_s", 0.0) * 1e12;
  MOESERVE_CHECK(m.copy_bytes_per_s > 0 && (m.kv_element_bytes == 1 || m.kv_element_bytes == 2),
                 "{}: copy_tb_per_s must be positive and kv_element_bytes 1 or 2", where);
  for (const nlohmann::json& row : json["rows"]) {
    MeasuredStep s;
    try {
      s.step = {row.at("sequences").get<int64_t>(), row.at("tokens").get<int64_t>(), row.at("context").get<int64_t>()};
      s.moe_layer_s = row.at("moe_layer_us").get<double>() * 1e-6;
      s.dense_layer_s = row.at("dense_layer_us").get<double>() * 1e-6;
      s.lm_head_s = row.at("lm_head_us").get<double>() * 1e-6;
      s.lm_head_rows = row.at("lm_head_rows").get<int64_t>();
      s.touched_experts = row.at("touched_experts").get<double>();
    } catch (const nlohmann::json::exception& e) {
      fail("{}: row {}: {}", where, row.dump(), e.what());
    }
    MOESERVE_CHECK(s.step.sequences > 0 && s.step.tokens > 0 && s.step.context >= 0 && s.moe_layer_s > 0 &&
                       s.dense_layer_s > 0 && s.lm_head_s > 0,
                   "{}: row {} needs positive shapes and times", where, row.dump());
    m.steps.push_back(s);
  }
  return m;
}

double all_reduce_seconds(double bytes, int gpus, double bus_bytes_per_s, double latency_s) {
  return latency_s + bytes * 2.0 * (gpus - 1) / gpus / bus_bytes_per_s;
}

double all_to_all_seconds(double bytes_sent_to_others, double bus_bytes_per_s, double latency_s) {
  return latency_s + bytes_sent_to_others / bus_bytes_per_s;
}

double expected_remote_gpus(const deepseek_v3::Config& c, int gpus) {
  const double E = c.n_routed_experts, elsewhere = E - E / gpus;
  double none_here = 1;  // the top_k drawn without replacement, none of them among one GPU's E / gpus
  for (int i = 0; i < c.num_experts_per_tok; ++i) none_here *= (elsewhere - i) / (E - i);
  return (gpus - 1) * (1 - none_here);
}

double mtp_tokens_per_iteration(double acceptance, int k) {
  double tokens = 0, p = 1;
  for (int i = 0; i <= k; ++i, p *= acceptance) tokens += p;
  return tokens;
}

double fixed_seconds(double time_a, double bytes_a, double time_b, double bytes_b) {
  MOESERVE_CHECK(bytes_a != bytes_b, "t_fixed needs two steps of different bytes");
  const double per_byte = (time_b - time_a) / (bytes_b - bytes_a);
  return std::clamp(time_a - per_byte * bytes_a, 0.0, std::min(time_a, time_b));
}

double scaled_seconds(double one_gpu_s, double one_gpu_bytes, double share_bytes, double fixed_s) {
  return fixed_s + (one_gpu_s - fixed_s) * share_bytes / one_gpu_bytes;
}

double tp_moe_share_bytes(const deepseek_v3::Config& c, const LayerStep& step, double touched, int gpus,
                          int kv_element_bytes) {
  const double experts = touched + std::max(c.n_shared_experts, 0);
  return static_cast<double>(mla_shared_projection_bytes(c) + router_bytes(c)) +
         static_cast<double>(mla_head_projection_bytes(c)) / gpus + experts * expert_bytes(c) / gpus +
         latent_kv_bytes(c, step, kv_element_bytes);
}

double tp_dense_share_bytes(const deepseek_v3::Config& c, const LayerStep& step, int gpus, int kv_element_bytes) {
  return static_cast<double>(mla_shared_projection_bytes(c)) +
         static_cast<double>(mla_head_projection_bytes(c) + dense_mlp_bytes(c)) / gpus +
         latent_kv_bytes(c, step, kv_element_bytes);
}

double eh_proj_bytes(const deepseek_v3::Config& c) { return 2.0 * c.hidden_size * c.hidden_size * 2; }

Projection project_batch1_mtp(const deepseek_v3::Config& c, const Measurements& m, const ProjectionSettings& s) {
  const int g = s.gpus, k = s.mtp_steps, kv = m.kv_element_bytes;
  const double dense_layers = c.first_k_dense_replace, moe_n = moe_layers(c), H = c.hidden_size;
  const MeasuredStep& m1 = m.find({1, 1, s.context});
  const MeasuredStep& m8 = m.find({8, 1, s.context});
  const MeasuredStep& mv = m.find({1, k + 1, s.context});
  Terms t;
  auto moe_bytes = [&](const MeasuredStep& x) { return moe_layer_floor(c, x.step, x.touched_experts, kv).bytes(); };
  auto dense_bytes = [&](const MeasuredStep& x) { return dense_layer_floor(c, x.step, kv).bytes(); };
  const double fixed =
      t.time("t_fixed (per layer)", fixed_seconds(m1.moe_layer_s, moe_bytes(m1), m8.moe_layer_s, moe_bytes(m8)),
             fmt::format("intercept through the MoE layer's decode figures ({:.1f} us, {:.3f} GB) "
                         "and ({:.1f} us, {:.3f} GB)",
                         us(m1.moe_layer_s), moe_bytes(m1) / 1e9, us(m8.moe_layer_s), moe_bytes(m8) / 1e9));
  // A layer of a one-sequence step (the verify step, an MTP step) split over the GPUs.
  auto split = [&](const std::string& name, double one_gpu_s, double one_gpu_bytes, double share) {
    return t.time(name, scaled_seconds(one_gpu_s, one_gpu_bytes, share, fixed),
                  fmt::format("t_fixed + ({:.1f} us - t_fixed) x {:.2f} MB a GPU / {:.2f} MB on one", us(one_gpu_s),
                              share / 1e6, one_gpu_bytes / 1e6));
  };
  auto split_moe = [&](const MeasuredStep& x, const std::string& what) {
    return split("MoE layer, " + what, x.moe_layer_s, moe_bytes(x),
                 tp_moe_share_bytes(c, x.step, x.touched_experts, g, kv));
  };
  auto split_dense = [&](const MeasuredStep& x, const std::string& what) {
    return split("dense layer, " + what, x.dense_layer_s, dense_bytes(x), tp_dense_share_bytes(c, x.step, g, kv));
  };
  auto lm_head = [&](const MeasuredStep& x, const std::string& what) {
    return t.time(
        "lm_head, " + what, x.lm_head_s / g,
        fmt::format("{:.1f} us ({} rows, one GPU) / {} (vocabulary split)", us(x.lm_head_s), x.lm_head_rows, g));
  };
  auto all_reduce = [&](double rows, const std::string& what) {
    const double bytes = rows * H * s.activation_bytes;
    return t.time("all-reduce, " + what, all_reduce_seconds(bytes, g, s.bus_bytes_per_s, s.collective_latency_s),
                  fmt::format("{:.0f} us + {:.0f} B x 2 x {}/{} / {:.0f} GB/s", us(s.collective_latency_s), bytes,
                              g - 1, g, s.bus_bytes_per_s / 1e9));
  };

  const std::string v = fmt::format("{} tokens", k + 1);
  const double verify_s =
      t.time("verify step (target)",
             dense_layers * split_dense(mv, v) + moe_n * split_moe(mv, v) + lm_head(mv, v) +
                 2 * c.num_layers * all_reduce(k + 1, v) + s.collective_latency_s,
             fmt::format("{} dense + {} MoE layers + lm_head + {} all-reduces + an argmax gather ({:.0f} us)",
                         dense_layers, moe_n, 2 * c.num_layers, us(s.collective_latency_s)));
  const double eh_s = t.time("eh_proj", eh_proj_bytes(c) / g / m.copy_bytes_per_s,
                             fmt::format("{:.1f} MB / {} / {:.2f} TB/s (copy bandwidth)", eh_proj_bytes(c) / 1e6, g,
                                         m.copy_bytes_per_s / 1e12));
  // An MTP step: eh_proj, its MoE decoder layer, the lm_head; an all-reduce after eh_proj and two in the layer.
  auto mtp_step = [&](const MeasuredStep& x, const std::string& what) {
    const double rows = static_cast<double>(x.step.total_tokens());
    return t.time("MTP step, " + what,
                  eh_s + split_moe(x, what) + lm_head(x, what) + 3 * all_reduce(rows, what) + s.collective_latency_s,
                  "eh_proj + MoE layer + lm_head + 3 all-reduces + an argmax gather");
  };
  const double extend_s = mtp_step(mv, "extend (" + v + ", an upper bound)");
  const double draft_s = mtp_step(m1, "1 token");
  const double iteration = t.time("iteration", verify_s + extend_s + (k - 1) * draft_s,
                                  fmt::format("verify + extend + {} x one-token MTP step", k - 1));
  const double tokens = t.add("tokens an iteration", mtp_tokens_per_iteration(s.acceptance, k), "tokens",
                              fmt::format("1 + a + ... + a^{} at a = {}", k, s.acceptance));
  Projection p;
  p.tokens_per_s = t.add("batch-1 tokens/s", tokens / iteration, "tokens/s", "tokens an iteration / iteration");
  p.reference = fmt::format("TensorRT-LLM, 8 x H200, TP8 EP4, MTP 3: {:.0f} tokens/s per user", kTrtBatch1TokensPerS);
  p.terms = t.take();
  return p;
}

Projection project_offline(const deepseek_v3::Config& c, const Measurements& m, const ProjectionSettings& s) {
  const int g = s.gpus, kv = m.kv_element_bytes;
  MOESERVE_CHECK(s.concurrency % g == 0, "Offline: concurrency {} is not a multiple of {} GPUs", s.concurrency, g);
  const double dense_layers = c.first_k_dense_replace, moe_n = moe_layers(c), H = c.hidden_size;
  const double per_gpu = static_cast<double>(s.concurrency) / g, spare = (g - 1.0) / g, bw = m.copy_bytes_per_s;
  const int64_t mean_context = s.input_tokens + s.output_tokens / 2;
  const MeasuredStep& d = m.find({s.concurrency, 1, mean_context});
  const MeasuredStep* prefill = nullptr;  // the largest prefill of input-length prompts
  for (const MeasuredStep& x : m.steps)
    if (x.step.tokens == s.input_tokens && x.step.context == 0 &&
        (prefill == nullptr || x.step.sequences > prefill->step.sequences))
      prefill = &x;
  MOESERVE_CHECK(prefill != nullptr, "the Offline projection needs a prefill of {}-token prompts (--prefill NxLENGTH)",
                 s.input_tokens);
  Terms t;
  t.add("sequences a GPU", per_gpu, "", fmt::format("{} / {}", s.concurrency, g));
  t.add("mean decode context", static_cast<double>(mean_context), "tokens",
        fmt::format("{} + {} / 2", s.input_tokens, s.output_tokens));
  // A layer's share: 1/g of the one-GPU step at the whole concurrency, plus the replicated weights' other reads.
  auto share = [&](const std::string& name, double one_gpu_s, double replicated, const std::string& what) {
    return t.time(name, one_gpu_s / g + spare * replicated / bw,
                  fmt::format("{:.1f} us (one GPU, batch {}) / {} + {}/{} x {:.1f} MB ({}) / {:.2f} TB/s",
                              us(one_gpu_s), s.concurrency, g, g - 1, g, replicated / 1e6, what, bw / 1e12));
  };
  const double moe_s = share("MoE layer", d.moe_layer_s,
                             static_cast<double>(attention_weight_bytes(c) + router_bytes(c)) +
                                 std::max(c.n_shared_experts, 0) * static_cast<double>(expert_bytes(c)),
                             "attention, router, shared expert");
  const double dense_s = share("dense layer", d.dense_layer_s,
                               static_cast<double>(attention_weight_bytes(c) + dense_mlp_bytes(c)), "attention, MLP");
  const double head_s = share("lm_head", d.lm_head_s, static_cast<double>(lm_head_bytes(c)), "lm_head");
  const double remote = t.add("remote GPUs a token", expected_remote_gpus(c, g), "",
                              fmt::format("{} x (1 - P(none of its {} experts among a GPU's {}))", g - 1,
                                          c.num_experts_per_tok, c.n_routed_experts / g));
  // All-to-all of `tokens` tokens a GPU, per MoE layer: dispatch (FP8) and combine (bf16).
  auto exchange = [&](double tokens, const std::string& what) {
    const double dispatch = tokens * remote * H * s.dispatch_bytes, combine = tokens * remote * H * s.activation_bytes;
    return t.time("all-to-all, " + what,
                  all_to_all_seconds(dispatch, s.bus_bytes_per_s, s.collective_latency_s) +
                      all_to_all_seconds(combine, s.bus_bytes_per_s, s.collective_latency_s),
                  fmt::format("2 x {:.0f} us + ({:.2f} + {:.2f}) MB / {:.0f} GB/s", us(s.collective_latency_s),
                              dispatch / 1e6, combine / 1e6, s.bus_bytes_per_s / 1e9));
  };
  const double a2a_s = exchange(per_gpu, "a decode step's MoE layer");
  const double step_s = t.time("decode step", dense_layers * dense_s + moe_n * (moe_s + a2a_s) + head_s,
                               fmt::format("{} dense + {} x (MoE layer + all-to-all) + lm_head", dense_layers, moe_n));

  const double prefill_tokens = static_cast<double>(prefill->step.total_tokens());
  const double per_token =
      t.time("prefill a token (all layers)",
             (dense_layers * prefill->dense_layer_s + moe_n * prefill->moe_layer_s) / prefill_tokens,
             fmt::format("({} x {:.0f} + {} x {:.0f}) us / {:.0f} tokens (one GPU, {})", dense_layers,
                         us(prefill->dense_layer_s), moe_n, us(prefill->moe_layer_s), prefill_tokens,
                         shape_name(prefill->step)));
  const double prompt_tokens = per_gpu * s.input_tokens;
  const double prefill_s = t.time("prefill of a GPU's prompts",
                                  prompt_tokens * per_token + moe_n * exchange(prompt_tokens, "prefill, MoE layer"),
                                  fmt::format("{:.0f} tokens x a token + {} all-to-alls", prompt_tokens, moe_n));
  t.add("latent KV a GPU at the end",
        per_gpu * static_cast<double>(s.input_tokens + s.output_tokens) * c.num_layers * c.latent_width() * kv / 1e9,
        "GB",
        fmt::format("{} sequences x {} tokens x {} layers x {} values x {} B", per_gpu,
                    s.input_tokens + s.output_tokens, c.num_layers, c.latent_width(), kv));
  const double outputs = per_gpu * static_cast<double>(s.output_tokens);
  Projection p;
  p.tokens_per_s =
      t.add("Offline tokens/s a GPU", outputs / (static_cast<double>(s.output_tokens) * step_s + prefill_s), "tokens/s",
            fmt::format("{:.0f} outputs / ({} decode steps + prefill)", outputs, s.output_tokens));
  t.add("Offline tokens/s, all GPUs", p.tokens_per_s * g, "tokens/s", fmt::format("x {}", g));
  p.reference =
      fmt::format("TensorRT-LLM, 8 x H200, TP8 EP8 attention-DP, 1,024 concurrent, 1k/2k: {:.0f} tokens/s a GPU",
                  kTrtOfflineTokensPerGpu);
  p.terms = t.take();
  return p;
}

std::string format_projection(const std::string& title, const Projection& p) {
  std::string out = title + "\n";
  for (const Term& term : p.terms)
    out +=
        fmt::format("  {:<46} {:>10} {:<8} = {}\n", term.name,
                    std::abs(term.value) >= 100 ? fmt::format("{:.0f}", term.value) : fmt::format("{:.4g}", term.value),
                    term.unit, term.formula);
  out += fmt::format("  projected {:.0f} tokens/s; beside {}\n", p.tokens_per_s, p.reference);
  return out;
}

deepseek_v3::Config full_r1_config() { return deepseek_v3::tiny_config({.layers = 61, .shape = "deepseek-r1"}); }

std::string format_projections(const Measurements& m, const ProjectionSettings& s) {
  const deepseek_v3::Config c = full_r1_config();
  const std::string setting = fmt::format("{} GPUs, bus {:.0f} GB/s, collective latency {:.0f} us", s.gpus,
                                          s.bus_bytes_per_s / 1e9, s.collective_latency_s * 1e6);
  return format_projection("DeepSeek-R1 batch 1 with MTP (TP8; " + setting + ")", project_batch1_mtp(c, m, s)) + "\n" +
         format_projection("DeepSeek-R1 Offline (TP8 EP8, attention data-parallel; " + setting + ")",
                           project_offline(c, m, s));
}

}  // namespace moeserve::deepseek_bench

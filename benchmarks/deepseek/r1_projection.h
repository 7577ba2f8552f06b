// Full DeepSeek-R1 (61 layers: 3 dense, 58 MoE, and its MTP layer) on 8 GPUs of one host, projected on paper from
// one GPU's per-layer figures (deepseek_layer_bench's JSON): every term is kept with its formula for printing
// (deepseek_projection). The layer times are the bench's moe_layer_us / dense_layer_us: one layer's call replayed
// as a CUDA graph (its GPU time, without launch gaps; the row's timing field says where capture failed and the
// launched time stands in), so the projection assumes steps run as graphs, as TensorRT-LLM's do. Two cases, each set
// beside TensorRT-LLM's published figure on 8 x H200 (reference/serving-anchors.md §5):
//
// Batch 1 with MTP (158 tokens/s per user: TP8 EP4, 3 MTP layers, ISL 1k / OSL 2k). Every layer split 8 ways by
// tensor parallelism: a GPU reads q_a and kv_a (shared by the heads) and the router whole, 1/8 of q_b, kv_b, o,
// of every expert and of the lm_head, and the whole latent KV (one latent for every head). A split layer's time:
//   t_gpu = t_fixed + (t_one - t_fixed) x (bytes a GPU reads / bytes one GPU read)
// i.e. the share runs at the bandwidth the one-GPU layer achieved at that step's shape, and t_fixed (kernel starts,
// latencies, what does not shrink with the bytes) is the intercept of the MoE layer's time against its bytes
// through the batch-1 and batch-8 decode figures (same kernels, 8 against 57 experts' bytes); the dense layer is
// given the same t_fixed (its attention's kernels are the same). An iteration (SGLang's EAGLE with the MTP head,
// reference/deepseek-v3-architecture.md §5): one verify step of the target over k + 1 tokens, one MTP extend over
// the accepted positions (priced as a (k + 1)-token step, an upper bound) and k - 1 one-token MTP steps; it yields
// 1 + a + ... + a^k tokens at per-position acceptance a. Two all-reduces a layer (attention output, FFN output) of
// the step's rows in bf16, one for the MTP head's eh_proj, and a gather of the distributed argmax per logits step.
//
// Offline (1,436 tokens/s per GPU: TP8 EP8 attention data-parallel, 1,024 concurrent, 1k in / 2k out, no MTP).
// Each GPU keeps its 1/8 of the sequences (their attention, KV, dense layers and lm_head whole on every GPU) and
// 1/8 of the routed experts. A GPU's share of a decode step is then 1/8 of the one-GPU step at the whole
// concurrency (same rows per expert, same FLOPs and KV per GPU), plus the weights every GPU reads whole again:
//   t_gpu = t_one(batch = concurrency) / 8 + 7/8 x replicated bytes / copy bandwidth
// at the mean decode context (input + output / 2). Tokens go to their experts' GPUs and back by all-to-all:
// dispatch in FP8 and combine in bf16 (the DeepSeek-V3 report's low-precision communication), one copy per distinct
// remote GPU a token's 8 experts live on. Prefill is priced per token at the one-GPU prefill figure of the input
// length.
//
// Collectives: NCCL's bus-bandwidth convention (nccl-tests' PERFORMANCE.md): an all-reduce of S bytes over n GPUs
// moves S x 2 (n - 1) / n bytes a GPU at the bus bandwidth; an all-to-all moves what a GPU sends to the others.
// Bus bandwidth 287 GB/s: a 256 MB all-reduce measured on a two-GPU H200 host (issue 20). Each collective also
// costs a latency (not measured here; PERF.md's "Several GPUs" section estimates 10-20 us for small NCCL
// all-reduces): a setting, shown as its own term.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "layer_floors.h"

namespace moeserve::deepseek_bench {

// One step shape measured on one GPU: one layer of each kind and the lm_head over the step's logits rows.
struct MeasuredStep {
  LayerStep step;
  double moe_layer_s = 0, dense_layer_s = 0;
  double lm_head_s = 0;
  int64_t lm_head_rows = 0;
  double touched_experts = 0;  // counted from the router in the timed step
};

struct Measurements {
  std::vector<MeasuredStep> steps;
  int kv_element_bytes = 2;
  double copy_bytes_per_s = 0;
  // The step of this shape; fails naming it and the flag that measures it.
  const MeasuredStep& find(const LayerStep& shape) const;
};
// deepseek_layer_bench's JSON (its "rows", "kv_element_bytes", "copy_tb_per_s"); `where` names it in errors.
Measurements measurements_from_json(const nlohmann::json& json, const std::string& where);

struct ProjectionSettings {
  int gpus = 8;
  double bus_bytes_per_s = 287e9;       // issue 20: NCCL bus bandwidth of a 256 MB all-reduce, two-GPU H200 host
  double collective_latency_s = 10e-6;  // each collective's fixed cost (assumed; see the header comment)
  // MTP: per-position acceptance. 0.7 is below both published hints (DeepSeek-V3's report: 85-90% for the first
  // MTP token; ATOM: 64.6% acceptance on R1-0528 with 3 MTP steps, which as accepted / drafted means ~0.8 a
  // position): a conservative choice (reference/deepseek-v3-architecture.md §5, eagle3-and-speed-bench.md).
  double acceptance = 0.7;
  int mtp_steps = 3;
  int64_t context = 2048;                                                 // batch 1: the mean context of 1k in / 2k out
  int64_t concurrency = 1024, input_tokens = 1024, output_tokens = 2048;  // Offline, TensorRT-LLM's run
  int activation_bytes = 2;                                               // bf16 all-reduces and combine
  int dispatch_bytes = 1;  // FP8 dispatch (its per-128 scales left out: 3%)
};

// A printed line: name = formula = value unit.
struct Term {
  std::string name, formula;
  double value = 0;
  std::string unit;
};
struct Projection {
  std::vector<Term> terms;
  double tokens_per_s = 0;  // batch 1: per user; Offline: per GPU
  std::string reference;    // the published figure beside it
};
std::string format_projection(const std::string& title, const Projection& p);

// ---- The pieces, each tested ----
// NCCL bus-bandwidth convention plus one latency.
double all_reduce_seconds(double bytes, int gpus, double bus_bytes_per_s, double latency_s);
double all_to_all_seconds(double bytes_sent_to_others, double bus_bytes_per_s, double latency_s);
// Distinct GPUs other than its own that a token's top_k experts live on, experts split evenly over `gpus`:
// (gpus - 1) x (1 - P(none of the top_k on a given GPU)), P hypergeometric.
double expected_remote_gpus(const deepseek_v3::Config& c, int gpus);
// Tokens an MTP iteration yields: 1 + a + a^2 + ... + a^k.
double mtp_tokens_per_iteration(double acceptance, int k);
// t_fixed: the intercept of time against bytes through two measured steps, within [0, the smaller time].
double fixed_seconds(double time_a, double bytes_a, double time_b, double bytes_b);
// A layer's share on one GPU of a split: t_fixed + (t_one - t_fixed) x share_bytes / one_bytes.
double scaled_seconds(double one_gpu_s, double one_gpu_bytes, double share_bytes, double fixed_s);
// Bytes a GPU reads for its share of a layer split 8 ways by tensor parallelism (see the header comment).
double tp_moe_share_bytes(const deepseek_v3::Config& c, const LayerStep& step, double touched, int gpus,
                          int kv_element_bytes);
double tp_dense_share_bytes(const deepseek_v3::Config& c, const LayerStep& step, int gpus, int kv_element_bytes);
// The MTP head's eh_proj [hidden, 2 hidden], bf16 as the checkpoint stores it.
double eh_proj_bytes(const deepseek_v3::Config& c);

// DeepSeek-R1 whole: 61 layers, the first 3 dense, one MTP layer (model/deepseek_v3/make_tiny's deepseek-r1 shape).
deepseek_v3::Config full_r1_config();

Projection project_batch1_mtp(const deepseek_v3::Config& c, const Measurements& m, const ProjectionSettings& s);
Projection project_offline(const deepseek_v3::Config& c, const Measurements& m, const ProjectionSettings& s);

// Both projections of full R1 (full_r1_config) from m, formatted one term a line; fails naming a missing figure.
std::string format_projections(const Measurements& m, const ProjectionSettings& s);

}  // namespace moeserve::deepseek_bench

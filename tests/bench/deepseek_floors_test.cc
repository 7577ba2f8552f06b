// DeepSeek-R1's per-layer floors and the 8-GPU projection's terms (benchmarks/deepseek), against values worked by
// hand from DeepSeek-V3's config (reference/deepseek-v3-architecture.md §1 and §8: hidden 7168, 256 routed
// experts of 2048, 1 shared, top-8, q_lora 1536, kv_lora 512, 128 heads of 128 + 64 / 128, FP8 with 128 x 128
// block scales, 61 layers of which 3 dense of 18432, vocab 129280).
#include <gtest/gtest.h>

#include "layer_floors.h"
#include "r1_projection.h"

namespace moeserve::deepseek_bench {
namespace {

const deepseek_v3::Config& r1() {
  static const deepseek_v3::Config c = full_r1_config();
  return c;
}

TEST(DeepseekFloors, WeightBytesMatchTheArchitectureNotes) {
  const auto& c = r1();
  // q_a [1536, 7168]: 11,010,048 values + 12 x 56 scales of 4 B.
  EXPECT_EQ(fp8_matrix_bytes(c, 1536, 7168), 11010048 + 12 * 56 * 4);
  // q_a + kv_a [576, 7168] (5 x 56 blocks).
  EXPECT_EQ(mla_shared_projection_bytes(c), 11012736 + 4128768 + 5 * 56 * 4);
  // q_b [24576, 1536], kv_b [32768, 512], o [7168, 16384].
  EXPECT_EQ(mla_head_projection_bytes(c),
            (37748736 + 192 * 12 * 4) + (16777216 + 256 * 4 * 4) + (117440512 + 56 * 128 * 4));
  EXPECT_EQ(attention_weight_bytes(c), 187151072);           // 187.1 M values a layer (§8) and their scales
  EXPECT_EQ(expert_bytes(c), 3 * (14680064 + 16 * 56 * 4));  // 44.04 M values (§8)
  EXPECT_EQ(router_bytes(c), 256 * 7168 * 2 + 256 * 4);
  EXPECT_EQ(dense_mlp_bytes(c), 3 * (132120576 + 144 * 56 * 4));  // 396.4 M (§8)
  EXPECT_EQ(lm_head_bytes(c), int64_t{129280} * 7168 * 2);        // 1.85 GB (§8)
  // §8: "the 9 experts of a MoE layer exactly equal one dense MLP" in values.
  EXPECT_EQ(9 * 3 * int64_t{2048} * 7168, 3 * int64_t{18432} * 7168);
}

TEST(DeepseekFloors, TouchedExpertsFollowUniformRouting) {
  // §8's table: B = 1: 8, 8: 57, 64: 222, 128: 252.
  EXPECT_DOUBLE_EQ(expected_touched_experts(r1(), 1), 8.0);
  EXPECT_NEAR(expected_touched_experts(r1(), 8), 57.42, 0.01);
  EXPECT_NEAR(expected_touched_experts(r1(), 64), 222.44, 0.01);
  EXPECT_NEAR(expected_touched_experts(r1(), 128), 252.0, 0.5);
}

TEST(DeepseekFloors, LatentKvAndPairs) {
  const LayerStep decode{1, 1, 2048}, verify{1, 4, 2048}, prefill{16, 1024, 0};
  EXPECT_DOUBLE_EQ(latent_kv_bytes(r1(), decode, 2), 2049.0 * 576 * 2);
  EXPECT_DOUBLE_EQ(latent_kv_bytes(r1(), prefill, 1), 16.0 * 1024 * 576);
  EXPECT_DOUBLE_EQ(decode.query_key_pairs(), 2049);
  EXPECT_DOUBLE_EQ(verify.query_key_pairs(), 2049 + 2050 + 2051 + 2052);
  EXPECT_DOUBLE_EQ(prefill.query_key_pairs(), 16.0 * 1024 * 1025 / 2);
}

TEST(DeepseekFloors, FlopsByTerm) {
  const auto& c = r1();
  // 2 x (q_a 1536 x 7168 + q_b 24576 x 1536 + kv_a 576 x 7168 + o 7168 x 16384) a token.
  EXPECT_DOUBLE_EQ(attention_projection_flops(c, 1), 340656128.0);
  // Decode at 2k, absorbed: kv_b's 16,777,216 MACs, then 2049 keys x 128 heads x 2 x (576 + 512).
  const LayerStep decode{1, 1, 2048};
  EXPECT_DOUBLE_EQ(mla_absorbed_flops(c, decode), 2.0 * 16777216 + 2049.0 * 278528);
  EXPECT_DOUBLE_EQ(mla_expanded_flops(c, decode), 2.0 * 2049 * 16777216 + 2049.0 * 81920);
  EXPECT_DOUBLE_EQ(attention_core_flops(c, decode), mla_absorbed_flops(c, decode));
  // Prefill of 4k from nothing: the expanded form is the floor (8,390,656 causal pairs).
  const LayerStep prefill{1, 4096, 0};
  EXPECT_DOUBLE_EQ(mla_absorbed_flops(c, prefill), 2474471587840.0);
  EXPECT_DOUBLE_EQ(mla_expanded_flops(c, prefill), 824801492992.0);
  EXPECT_DOUBLE_EQ(attention_core_flops(c, prefill), 824801492992.0);
  // Router 256 x 7168 and 9 experts of 3 x 2048 x 7168 a token.
  EXPECT_DOUBLE_EQ(moe_flops(c, 1), 2.0 * (1835008 + 396361728));
  EXPECT_DOUBLE_EQ(dense_mlp_flops(c, 1), 792723456.0);
  EXPECT_DOUBLE_EQ(lm_head_flops(c, 2), 4.0 * 129280 * 7168);
}

TEST(DeepseekFloors, LayerFloorsSumTheirTerms) {
  const auto& c = r1();
  const LayerStep decode{1, 1, 2048};
  const LayerFloor moe = moe_layer_floor(c, decode, 8, 2);
  EXPECT_DOUBLE_EQ(moe.bytes(), 187151072.0 + 3671040 + 44050944 + 8 * 44050944.0 + 2049.0 * 1152);
  EXPECT_DOUBLE_EQ(moe.gemm_flops, 340656128.0 + 796393472.0);
  EXPECT_DOUBLE_EQ(moe.attention_core_flops, mla_absorbed_flops(c, decode));
  const LayerFloor dense = dense_layer_floor(c, decode, 1);
  EXPECT_DOUBLE_EQ(dense.bytes(), 187151072.0 + 396458496 + 2049.0 * 576);
  EXPECT_DOUBLE_EQ(dense.gemm_flops, 340656128.0 + 792723456.0);
  // 1 GB at 4 TB/s; 1e12 GEMM FLOPs at 1,000 TFLOP/s plus the core at 500.
  LayerFloor f;
  f.routed_expert_bytes = 1e9;
  f.gemm_flops = 1e12;
  f.attention_core_flops = 1e11;
  EXPECT_DOUBLE_EQ(byte_floor_seconds(f, 4e12), 2.5e-4);
  EXPECT_DOUBLE_EQ(flop_floor_seconds(f, 1e15, 5e14), 1e-3 + 2e-4);
}

// The classes of deepseek_layer_bench --breakdown add up to the layer floor (the step's attention form), each class
// holding its own terms.
TEST(DeepseekFloors, ClassFloorsSumToTheLayerFloor) {
  const auto& c = r1();
  auto sum = [](const LayerClassFloors& f) {
    ClassFloor total;
    for (const ClassFloor* x : {&f.qkv_projection, &f.kv_write, &f.latent_expansion, &f.attention_prefill,
                                &f.attention_decode, &f.output_projection, &f.router, &f.experts_gate_up,
                                &f.experts_down, &f.mlp}) {
      total.bytes += x->bytes;
      total.fp8_flops += x->fp8_flops;
      total.bf16_flops += x->bf16_flops;
    }
    return total;
  };
  const LayerStep prefill{1, 4096, 0}, decode{8, 1, 2048};
  for (const LayerStep& step : {prefill, decode}) {
    const bool expanded = step.context == 0;  // the cheaper form of each (attention_core_flops)
    const double touched = expected_touched_experts(c, static_cast<double>(step.total_tokens()));
    const LayerFloor moe = moe_layer_floor(c, step, touched, 2), dense = dense_layer_floor(c, step, 1);
    const ClassFloor moe_sum = sum(layer_class_floors(c, step, true, touched, 2, expanded));
    const ClassFloor dense_sum = sum(layer_class_floors(c, step, false, 0, 1, expanded));
    EXPECT_NEAR(moe_sum.bytes, moe.bytes(), 1e-9 * moe.bytes());
    EXPECT_NEAR(moe_sum.fp8_flops + moe_sum.bf16_flops, moe.flops(), 1e-9 * moe.flops());
    EXPECT_NEAR(dense_sum.bytes, dense.bytes(), 1e-9 * dense.bytes());
    EXPECT_NEAR(dense_sum.fp8_flops + dense_sum.bf16_flops, dense.flops(), 1e-9 * dense.flops());
  }
  // Terms by hand at 4,096 prefill tokens: o is 7,168 x 16,384; the pairs' 128 heads x (192 + 128) x 2 FLOPs;
  // the router 256 x 7,168 in bf16; one shared expert's gate, up and down.
  const LayerClassFloors f = layer_class_floors(c, prefill, true, 256, 2, true);
  EXPECT_DOUBLE_EQ(f.output_projection.fp8_flops, 2.0 * 4096 * 7168 * 16384);
  EXPECT_DOUBLE_EQ(f.attention_prefill.bf16_flops, 8390656.0 * 81920);
  EXPECT_DOUBLE_EQ(f.latent_expansion.bf16_flops, 2.0 * 4096 * 16777216);
  EXPECT_DOUBLE_EQ(f.router.bf16_flops, 2.0 * 4096 * 256 * 7168);
  EXPECT_DOUBLE_EQ(f.mlp.fp8_flops, 2.0 * 4096 * 3 * 2048 * 7168);
  EXPECT_DOUBLE_EQ(f.experts_gate_up.bytes, 256 * 2.0 * fp8_matrix_bytes(c, 2048, 7168));
  EXPECT_DOUBLE_EQ(f.kv_write.bytes, 4096.0 * 576 * 2);
  EXPECT_EQ(f.attention_decode.bytes, 0.0);
  // Seconds: the larger of the bytes' time and the FLOPs' at their rates.
  const ClassFloor x{4e9, 1e12, 5e11};
  EXPECT_DOUBLE_EQ(x.seconds(4e12, 1e15, 5e14), 2e-3);
  EXPECT_DOUBLE_EQ(x.seconds(1e13, 1e15, 5e14), 2e-3);
  EXPECT_DOUBLE_EQ(x.seconds(1e12, 1e15, 5e14), 4e-3);
}

TEST(DeepseekProjection, Pieces) {
  const auto& c = r1();
  // NCCL's bus bandwidth: 256 MB all-reduced over 2 GPUs moves 256 MB a GPU; over 8, 2 x 7/8 of it.
  EXPECT_DOUBLE_EQ(all_reduce_seconds(256e6, 2, 287e9, 0), 256e6 / 287e9);
  EXPECT_DOUBLE_EQ(all_reduce_seconds(256e6, 8, 287e9, 1e-5), 1e-5 + 256e6 * 1.75 / 287e9);
  EXPECT_DOUBLE_EQ(all_to_all_seconds(287e6, 287e9, 0), 1e-3);
  // P(none of 8 experts among a GPU's 32 of 256) = prod (224 - i) / (256 - i) = 0.33817.
  EXPECT_NEAR(expected_remote_gpus(c, 8), 7 * (1 - 0.33816849995), 1e-9);
  EXPECT_DOUBLE_EQ(mtp_tokens_per_iteration(0.7, 3), 1 + 0.7 + 0.49 + 0.343);
  EXPECT_DOUBLE_EQ(mtp_tokens_per_iteration(0.0, 3), 1.0);
  EXPECT_DOUBLE_EQ(fixed_seconds(100, 1, 200, 3), 50);  // 50 a byte: the line through them meets 0 bytes at 50
  EXPECT_DOUBLE_EQ(fixed_seconds(100, 1, 300, 2), 0);   // an intercept below 0 is clamped
  EXPECT_DOUBLE_EQ(scaled_seconds(100e-6, 1000, 250, 20e-6), 40e-6);
  // A batch-1 MoE layer on 8 GPUs: q_a + kv_a + router whole, 1/8 of q_b, kv_b, o and of 9 experts, all the KV.
  EXPECT_DOUBLE_EQ(tp_moe_share_bytes(c, {1, 1, 2048}, 8, 8, 2),
                   15142624.0 + 3671040 + 172008448 / 8.0 + 9 * 44050944 / 8.0 + 2049.0 * 1152);
  EXPECT_DOUBLE_EQ(tp_dense_share_bytes(c, {1, 1, 2048}, 8, 2),
                   15142624.0 + (172008448 + 396458496) / 8.0 + 2049.0 * 1152);
  EXPECT_DOUBLE_EQ(eh_proj_bytes(c), 2.0 * 7168 * 7168 * 2);
}

// A bench JSON of made-up times: every layer at its byte floor over 4 TB/s plus 50 us.
nlohmann::json fixture() {
  const auto& c = r1();
  nlohmann::json rows = nlohmann::json::array();
  auto row = [&](LayerStep s, int64_t head_rows) {
    const double touched = expected_touched_experts(c, static_cast<double>(s.total_tokens()));
    const double moe = moe_layer_floor(c, s, touched, 2).bytes() / 4e12 * 1e6 + 50;
    const double dense = dense_layer_floor(c, s, 2).bytes() / 4e12 * 1e6 + 50;
    rows.push_back({{"sequences", s.sequences},
                    {"tokens", s.tokens},
                    {"context", s.context},
                    {"moe_layer_us", moe},
                    {"dense_layer_us", dense},
                    {"lm_head_us", 500.0},
                    {"lm_head_rows", head_rows},
                    {"touched_experts", touched}});
  };
  for (int64_t b : {1, 8, 1024}) row({b, 1, 2048}, b);
  row({1, 4, 2048}, 4);
  row({16, 1024, 0}, 16);
  return {{"gpu", "fixture"}, {"copy_tb_per_s", 4.0}, {"kv_element_bytes", 2}, {"rows", rows}};
}

double term(const Projection& p, const std::string& name) {
  for (const Term& t : p.terms)
    if (t.name == name) return t.value;
  ADD_FAILURE() << "no term " << name;
  return 0;
}

TEST(DeepseekProjection, Batch1WithMtpComposesItsTerms) {
  const Measurements m = measurements_from_json(fixture(), "fixture");
  const ProjectionSettings s;
  const Projection p = project_batch1_mtp(r1(), m, s);
  // Times were made as floor / 4 TB/s + 50 us: the intercept finds the 50 us.
  EXPECT_NEAR(term(p, "t_fixed (per layer)"), 50, 1e-6);
  const double verify = 3 * term(p, "dense layer, 4 tokens") + 58 * term(p, "MoE layer, 4 tokens") +
                        term(p, "lm_head, 4 tokens") + 122 * term(p, "all-reduce, 4 tokens") + 10;
  EXPECT_NEAR(term(p, "verify step (target)"), verify, 1e-6);
  EXPECT_NEAR(term(p, "lm_head, 4 tokens"), 500.0 / 8, 1e-9);
  EXPECT_NEAR(term(p, "all-reduce, 4 tokens"), 10 + 4 * 7168 * 2 * 1.75 / 287e9 * 1e6, 1e-9);
  const double iteration = term(p, "verify step (target)") + term(p, "MTP step, extend (4 tokens, an upper bound)") +
                           2 * term(p, "MTP step, 1 token");
  EXPECT_NEAR(term(p, "iteration"), iteration, 1e-6);
  EXPECT_NEAR(p.tokens_per_s, 2.533 / (iteration * 1e-6), 1e-6);
  EXPECT_NE(format_projection("batch 1", p).find("158 tokens/s per user"), std::string::npos);
}

TEST(DeepseekProjection, OfflineComposesItsTerms) {
  const Measurements m = measurements_from_json(fixture(), "fixture");
  const Projection p = project_offline(r1(), m, ProjectionSettings{});
  EXPECT_DOUBLE_EQ(term(p, "sequences a GPU"), 128);
  EXPECT_DOUBLE_EQ(term(p, "mean decode context"), 2048);
  // Dispatch 128 tokens x 4.633 GPUs x 7168 x 1 B, combine the same at 2 B, over 287 GB/s, plus two latencies.
  EXPECT_NEAR(term(p, "all-to-all, a decode step's MoE layer"), 64.4317, 1e-3);
  const double step = 3 * term(p, "dense layer") +
                      58 * (term(p, "MoE layer") + term(p, "all-to-all, a decode step's MoE layer")) +
                      term(p, "lm_head");
  EXPECT_NEAR(term(p, "decode step"), step, 1e-6);
  const double outputs = 128.0 * 2048;
  EXPECT_NEAR(p.tokens_per_s, outputs / ((2048 * step + term(p, "prefill of a GPU's prompts")) * 1e-6), 1e-6);
  EXPECT_NEAR(term(p, "latent KV a GPU at the end"), 128.0 * 3072 * 61 * 576 * 2 / 1e9, 1e-9);
}

TEST(DeepseekProjection, MissingFiguresAreNamed) {
  nlohmann::json json = fixture();
  json["rows"].erase(json["rows"].begin() + 2);  // batch 1024
  const Measurements m = measurements_from_json(json, "fixture");
  try {
    project_offline(r1(), m, ProjectionSettings{});
    FAIL() << "expected an error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("1024 x 1 tokens @ 2048"), std::string::npos) << e.what();
  }
  json["rows"][0].erase("moe_layer_us");
  EXPECT_THROW(measurements_from_json(json, "fixture"), std::exception);
}

}  // namespace
}  // namespace moeserve::deepseek_bench

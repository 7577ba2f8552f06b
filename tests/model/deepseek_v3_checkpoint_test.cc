// DeepSeek-V3 checkpoints: the config (every field, YaRN and the softmax scale), FP8 e4m3 values and block scales
// with partial last blocks, sharding, the MTP module, and bad input named in a clear error.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "deepseek_test_util.h"
#include "model/deepseek_v3/checkpoint.h"
#include "model/fp8_blocks.h"
#include "test_util.h"
#include "util/error.h"
#include "util/files.h"

namespace moeserve::deepseek_v3 {
namespace {

using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

TinyOptions small_vocab() {
  TinyOptions o;
  o.vocab = 1024;
  return o;
}

TEST(Fp8E4m3, ValuesAndRounding) {
  EXPECT_EQ(fp8_e4m3_to_float(0x00), 0.0f);
  EXPECT_EQ(fp8_e4m3_to_float(0x01), std::ldexp(1.0f, -9));  // the smallest subnormal
  EXPECT_EQ(fp8_e4m3_to_float(0x08), std::ldexp(1.0f, -6));  // the smallest normal
  EXPECT_EQ(fp8_e4m3_to_float(0x38), 1.0f);
  EXPECT_EQ(fp8_e4m3_to_float(0x7E), 448.0f);
  EXPECT_EQ(fp8_e4m3_to_float(0xBE), -1.75f);
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_float(0x7F)));
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_float(0xFF)));
  for (int code = 0; code < 256; ++code) {
    if ((code & 0x7F) == 0x7F) continue;
    const float v = fp8_e4m3_to_float(static_cast<uint8_t>(code));
    EXPECT_EQ(fp8_e4m3_to_float(float_to_fp8_e4m3(v)), v) << code;
  }
  EXPECT_EQ(float_to_fp8_e4m3(1.0625f), 0x38);  // halfway between 1 and 1.125: to the even code
  EXPECT_EQ(float_to_fp8_e4m3(1.1875f), 0x3A);  // halfway between 1.125 and 1.25: to the even code
  EXPECT_EQ(float_to_fp8_e4m3(1.07f), 0x39);
  EXPECT_EQ(float_to_fp8_e4m3(1000.0f), 0x7E);  // saturates
  EXPECT_EQ(float_to_fp8_e4m3(-1000.0f), 0xFE);
}

TEST(DeepseekV3Config, ReadsEveryFieldOfTheTinyModel) {
  auto checkpoint = Checkpoint::open(testing::tiny_deepseek_model(small_vocab()));
  const Config& c = checkpoint->config();
  EXPECT_EQ(c.num_layers, 3);
  EXPECT_EQ(c.first_k_dense_replace, 1);
  EXPECT_EQ(c.q_lora_rank, 160);
  EXPECT_EQ(c.kv_lora_rank, 144);
  EXPECT_EQ(c.qk_head_dim(), 48);
  EXPECT_EQ(c.v_head_dim, 40);
  EXPECT_EQ(c.n_group, 4);
  EXPECT_EQ(c.topk_group, 2);
  EXPECT_EQ(c.num_nextn_predict_layers, 1);
  EXPECT_TRUE(c.fp8);
  EXPECT_TRUE(c.rope.yarn);
  EXPECT_EQ(c.eos_token_ids, std::vector<int32_t>{1});
  // R1's numbers (DeepSeek-R1 config): m = 0.1 ln 40 + 1 = 1.36888795, scale = 48^-0.5 m^2; cos/sin unscaled.
  const double m = 0.1 * std::log(40.0) + 1.0;
  EXPECT_NEAR(c.softmax_scale(), m * m / std::sqrt(48.0), 1e-7);
  EXPECT_FLOAT_EQ(c.rope_attention_factor(), 1.0f);
  const ModelConfig engine = c.engine_view();
  EXPECT_EQ(engine.family, ModelFamily::deepseek_v3);
  EXPECT_EQ(engine.layer_types, std::vector<AttentionKind>(3, AttentionKind::full));
  EXPECT_EQ(engine.vocab_size, 1024);
}

TEST(DeepseekV3Config, YarnFrequenciesForRopeDimensionSixtyFour) {
  // DeepSeek-R1's rope dim 64: j <= 10 unchanged, j >= 23 divided by 40 (the reference's sample values).
  Config c = tiny_config({});
  c.qk_rope_head_dim = 64;
  const std::vector<float> inv = c.rope_inverse_frequencies();
  ASSERT_EQ(inv.size(), 32u);
  EXPECT_FLOAT_EQ(inv[0], 1.0f);
  EXPECT_NEAR(inv[10], 0.0562341, 1e-7);
  EXPECT_NEAR(inv[11], 0.0390069, 1e-7);
  EXPECT_NEAR(inv[22], 1.77828e-4, 1e-9);
  EXPECT_NEAR(inv[23], 3.33380e-5, 1e-10);
  EXPECT_NEAR(inv[31], 3.33380e-6, 1e-11);
  // mscale and mscale_all_dim differing: transformers scales cos and sin by their ratio.
  c.rope.mscale = 0.8;
  const double num = 0.1 * 0.8 * std::log(40.0) + 1.0, den = 0.1 * std::log(40.0) + 1.0;
  EXPECT_NEAR(c.rope_attention_factor(), num / den, 1e-7);
  // Plain RoPE (rope_scaling null): theta^(-2j/d), no mscale.
  c.rope.yarn = false;
  EXPECT_NEAR(c.rope_inverse_frequencies()[1], std::pow(10000.0, -2.0 / 64), 1e-8);
  EXPECT_NEAR(c.softmax_scale(), 1.0 / std::sqrt(static_cast<double>(c.qk_head_dim())), 1e-8);
}

TEST(DeepseekV3Checkpoint, Fp8WeightsWithPartialLastBlocks) {
  auto checkpoint = Checkpoint::open(testing::tiny_deepseek_model(small_vocab()));
  const Weights& w = checkpoint->weights();
  const Linear& kv_a = w.layers[0].attention.kv_a;  // [160, 64]: rows in blocks of 128 + 32
  ASSERT_TRUE(kv_a.is_fp8);
  EXPECT_EQ(kv_a.fp8.scale_rows(), 2);
  EXPECT_EQ(kv_a.fp8.scale_cols(), 1);
  const Linear& kv_b = w.layers[0].attention.kv_b;  // [288, 144]: columns in blocks of 128 + 16
  EXPECT_EQ(kv_b.fp8.scale_rows(), 3);
  EXPECT_EQ(kv_b.fp8.scale_cols(), 2);
  // Each element is its e4m3 value times its block's scale, and each block's largest magnitude is 448 x scale
  // (make-tiny quantised by amax / 448).
  const Fp8BlockMatrix& m = kv_b.fp8;
  for (int64_t br = 0; br < m.scale_rows(); ++br)
    for (int64_t bc = 0; bc < m.scale_cols(); ++bc) {
      float amax = 0.0f;
      for (int64_t r = br * 128; r < std::min<int64_t>(m.rows, (br + 1) * 128); ++r)
        for (int64_t c = bc * 128; c < std::min<int64_t>(m.cols, (bc + 1) * 128); ++c) {
          EXPECT_EQ(kv_b.at(r, c), fp8_e4m3_to_float(m.row(r)[c]) * m.scales[br * m.scale_cols() + bc]);
          amax = std::max(amax, std::fabs(kv_b.at(r, c)));
        }
      EXPECT_FLOAT_EQ(amax, 448.0f * m.scales[br * m.scale_cols() + bc]);
    }
  EXPECT_FALSE(w.layers[0].moe);
  EXPECT_TRUE(w.layers[1].moe);
  EXPECT_EQ(w.layers[1].experts.size(), 16u);
  ASSERT_TRUE(w.layers[1].shared.has_value());
  for (float b : w.layers[1].router_bias) EXPECT_TRUE(b >= 0.0f && b < 0.5f) << b;
  ASSERT_TRUE(checkpoint->has_mtp());
  EXPECT_TRUE(w.mtp->layer.moe);
  EXPECT_EQ(w.mtp->eh_proj.cols(), 128);
  EXPECT_NE(w.mtp->embedding.data, w.embedding.data);  // the module's own copy, equal to the main one
  EXPECT_EQ(w.mtp->embedding.at(7, 3), w.embedding.at(7, 3));
}

TEST(DeepseekV3Checkpoint, ShardedWithAnIndexHoldsTheSameWeights) {
  TinyOptions sharded = small_vocab();
  sharded.shards = 3;
  const std::string dir = testing::tiny_deepseek_model(sharded);
  EXPECT_TRUE(file_exists(dir + "/model.safetensors.index.json"));
  auto a = Checkpoint::open(dir);
  auto b = Checkpoint::open(testing::tiny_deepseek_model(small_vocab()));
  EXPECT_EQ(a->tensors().files().size(), 3u);
  const Linear& x = a->weights().layers[2].experts[5].down;
  const Linear& y = b->weights().layers[2].experts[5].down;
  for (int64_t r = 0; r < x.rows(); r += 7)
    for (int64_t c = 0; c < x.cols(); c += 5) EXPECT_EQ(x.at(r, c), y.at(r, c));
}

TEST(DeepseekV3Checkpoint, Bf16WeightsAndTheRealVocabularyWithItsTokenizer) {
  TinyOptions bf16;
  bf16.fp8 = false;
  const std::string dir = testing::tiny_deepseek_model(bf16);
  auto checkpoint = Checkpoint::open(dir);
  EXPECT_FALSE(checkpoint->config().fp8);
  EXPECT_FALSE(checkpoint->weights().layers[0].attention.q_a.is_fp8);
  EXPECT_EQ(checkpoint->config().vocab_size, 129280);
  EXPECT_TRUE(file_exists(dir + "/tokenizer.json"));
  EXPECT_TRUE(file_exists(dir + "/tokenizer_config.json"));
}

// Expects Checkpoint::open to fail with a message containing every one of `parts`.
void expect_open_fails(const std::string& dir, std::initializer_list<std::string> parts) {
  try {
    Checkpoint::open(dir);
    ADD_FAILURE() << "opened " << dir << " without error";
  } catch (const Error& e) {
    for (const auto& part : parts) EXPECT_THAT(e.what(), HasSubstr(part));
  }
}

void drop(std::vector<TensorToWrite>& tensors, const std::string& name) {
  std::erase_if(tensors, [&](const TensorToWrite& t) { return t.name == name; });
}

TEST(DeepseekV3Checkpoint, BadInputIsAClearError) {
  const std::string good = testing::tiny_deepseek_model(small_vocab());
  const std::string q_a = "model.layers.1.self_attn.q_a_proj.weight";
  expect_open_fails(testing::edited_deepseek_copy(good, {}, [&](auto& t) { drop(t, q_a + "_scale_inv"); }),
                    {q_a, "FP8 weight without its block scales", q_a + "_scale_inv"});
  expect_open_fails(testing::edited_deepseek_copy(good, {}, [&](auto& t) {
                      drop(t, q_a + "_scale_inv");
                      t.push_back(testing::tensor_of(q_a + "_scale_inv", DType::F32, {1, 2}, std::vector<uint8_t>(8)));
                    }),
                    {q_a + "_scale_inv", "scales of the wrong block shape", "[160, 64]", "needs [2, 1]"});
  expect_open_fails(testing::edited_deepseek_copy(good, [](auto& c) { c["topk_method"] = "greedy"; }),
                    {"config.json", "unknown topk_method \"greedy\"", "noaux_tc"});
  expect_open_fails(testing::edited_deepseek_copy(good, [](auto& c) { c.erase("quantization_config"); }),
                    {"an FP8 weight, but config.json has no fp8 quantization_config"});
  expect_open_fails(testing::edited_deepseek_copy(good, [](auto& c) { c["q_lora_rank"] = nullptr; }),
                    {"model.layers.0.self_attn.q_proj.weight"});
  expect_open_fails(testing::edited_deepseek_copy(good, [](auto& c) { c["kv_lora_rank"] = 128; }),
                    {"model.layers.0.self_attn.kv_a_proj_with_mqa.weight", "expected shape [144, 64]"});
  expect_open_fails(testing::edited_deepseek_copy(good, [](auto& c) { c["n_group"] = 3; }),
                    {"n_routed_experts 16 must split into n_group 3 groups"});
  expect_open_fails(testing::edited_deepseek_copy(good, [](auto& c) { c["max_position_embeddings"] = 8192; }),
                    {"rope_scaling factor 40 disagrees with max_position_embeddings"});
  expect_open_fails(testing::edited_deepseek_copy(good, [](auto& c) { c["scoring_func"] = "softmax"; }),
                    {"scoring_func \"softmax\" is not supported"});
  expect_open_fails(testing::edited_deepseek_copy(good, [](auto& c) { c["quantization_config"]["fmt"] = "e5m2"; }),
                    {"fmt \"e5m2\" is not supported"});
  expect_open_fails(testing::edited_deepseek_copy(good, {}, [](auto& t) {
                      t.push_back(testing::tensor_of("model.layers.0.mlp.extra.weight", DType::BF16, {2}, std::vector<uint8_t>(4)));
                    }),
                    {"model.layers.0.mlp.extra.weight", "not part of a DeepSeek-V3 model"});
  const std::string router = "model.layers.2.mlp.gate.weight";
  expect_open_fails(testing::edited_deepseek_copy(good, {}, [&](auto& t) {
                      drop(t, router);
                      t.push_back(testing::tensor_of(router, DType::F8_E4M3, {16, 64}, std::vector<uint8_t>(16 * 64)));
                    }),
                    {router, "dtype F8_E4M3 is not allowed here"});
}

TEST(DeepseekV3Checkpoint, WithoutTheMtpLayerItServesWithoutDrafting) {
  const std::string dir = testing::edited_deepseek_copy(testing::tiny_deepseek_model(small_vocab()), {}, [](auto& t) {
    std::erase_if(t, [](const TensorToWrite& x) { return x.name.rfind("model.layers.3.", 0) == 0; });
  });
  auto checkpoint = Checkpoint::open(dir);
  EXPECT_FALSE(checkpoint->has_mtp());
  // A partial MTP layer is an error naming what is missing.
  const std::string partial = testing::edited_deepseek_copy(testing::tiny_deepseek_model(small_vocab()), {}, [](auto& t) {
    drop(t, "model.layers.3.eh_proj.weight");
  });
  expect_open_fails(partial, {"model.layers.3.eh_proj.weight"});
}

}  // namespace
}  // namespace moeserve::deepseek_v3

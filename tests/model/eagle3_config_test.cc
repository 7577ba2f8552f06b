// EAGLE-3 draft config parsing: the exported layout, defaults, and bad input named in the error.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "model/eagle3/config.h"
#include "util/error.h"

namespace moeserve::speculative {
namespace {

using nlohmann::json;

// The shape of ModelOpt's export for gpt-oss-120b (SpecForge's geometry, reference section 1.4).
json gpt_oss_draft() {
  return json::parse(R"({
    "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": 2880,
    "intermediate_size": 17280, "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64,
    "num_hidden_layers": 1, "rms_norm_eps": 1e-5, "rope_theta": 150000.0, "rope_scaling": null,
    "max_position_embeddings": 131072, "vocab_size": 201088, "draft_vocab_size": 32000,
    "tie_word_embeddings": false,
    "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 17, 33], "use_aux_hidden_state": true,
                     "norm_before_fc": true}})");
}

void expect_fails(const json& j, int layers, std::initializer_list<std::string> parts) {
  try {
    parse_eagle3_config(j, "draft/config.json", layers);
    ADD_FAILURE() << "parsed " << j.dump();
  } catch (const Error& e) {
    for (const auto& part : parts) EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(Eagle3Config, ParsesTheExportedLayout) {
  Eagle3Config c = parse_eagle3_config(gpt_oss_draft(), "draft/config.json", 36);
  EXPECT_EQ(c.hidden_size, 2880);
  EXPECT_EQ(c.intermediate_size, 17280);
  EXPECT_EQ(c.num_heads, 64);
  EXPECT_EQ(c.num_kv_heads, 8);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.vocab_size, 201088);
  EXPECT_EQ(c.draft_vocab_size, 32000);
  EXPECT_EQ(c.target_hidden_size, 2880);
  EXPECT_EQ(c.aux_layer_ids, (std::vector<int>{1, 17, 33}));
  EXPECT_EQ(c.feature_width(), 3 * 2880);
  EXPECT_TRUE(c.norm_before_fc);  // inside eagle_config, as NVIDIA's gpt-oss heads keep it
  EXPECT_FALSE(c.norm_before_residual);
  EXPECT_EQ(c.rope.scaling, LlamaRope::Scaling::none);
  EXPECT_EQ(c.rope.theta, 150000.0);
}

TEST(Eagle3Config, DefaultAuxLayersAreModelOptsOutputsOfLayers) {
  json j = gpt_oss_draft();
  j["eagle_config"].erase("eagle_aux_hidden_state_layer_ids");
  EXPECT_EQ(parse_eagle3_config(j, "x", 36).aux_layer_ids, (std::vector<int>{1, 17, 32}));
  EXPECT_EQ(parse_eagle3_config(j, "x", 24).aux_layer_ids, (std::vector<int>{1, 11, 20}));
  j.erase("eagle_config");
  EXPECT_EQ(parse_eagle3_config(j, "x", 36).aux_layer_ids, (std::vector<int>{1, 17, 32}));
  EXPECT_EQ(default_aux_layer_ids(4), (std::vector<int>{0, 1}));  // {1, 1, 0}: a set, as ModelOpt's
  expect_fails(j, 3, {"3 layers", "eagle_aux_hidden_state_layer_ids"});
}

TEST(Eagle3Config, FlagsAtTheTopLevelOrInEagleConfig) {
  json j = gpt_oss_draft();
  j["eagle_config"].erase("norm_before_fc");
  EXPECT_FALSE(parse_eagle3_config(j, "x", 36).norm_before_fc);
  j["norm_before_fc"] = true;
  j["norm_before_residual"] = true;
  Eagle3Config c = parse_eagle3_config(j, "x", 36);
  EXPECT_TRUE(c.norm_before_fc);
  EXPECT_TRUE(c.norm_before_residual);
  j["eagle_config"]["norm_before_fc"] = false;
  expect_fails(j, 36, {"norm_before_fc", "top level", "eagle_config"});
}

TEST(Eagle3Config, Llama3RopeScaling) {
  json j = gpt_oss_draft();
  j["rope_theta"] = 500000.0;
  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}};
  Eagle3Config c = parse_eagle3_config(j, "x", 36);
  ASSERT_EQ(c.rope.scaling, LlamaRope::Scaling::llama3);
  std::vector<float> f = llama_rope_inverse_frequencies(c.rope, c.head_dim);
  ASSERT_EQ(f.size(), 32u);
  // Wavelengths under 8192 / 4 keep their frequency; over 8192 / 1 are divided by 8; between, interpolated.
  for (int i = 0; i < 32; ++i) {
    const double base = std::pow(500000.0, -2.0 * i / 64.0);
    const double wavelen = 2 * std::numbers::pi / base;
    double expected = base;
    if (wavelen > 8192) {
      expected = base / 8;
    } else if (wavelen >= 2048) {
      const double smooth = (8192 / wavelen - 1) / 3;
      expected = (1 - smooth) * base / 8 + smooth * base;
    }
    EXPECT_NEAR(f[i], expected, 1e-6 * expected) << i;
  }
}

TEST(Eagle3Config, BadInputNamesTheField) {
  json j = gpt_oss_draft();
  j["architectures"] = {"LlamaForCausalLM"};
  expect_fails(j, 36, {"architectures", "LlamaForCausalLMEagle3"});
  j = gpt_oss_draft();
  j.erase("hidden_size");
  expect_fails(j, 36, {"draft/config.json", "missing \"hidden_size\""});
  j = gpt_oss_draft();
  j["intermediate_size"] = "big";
  expect_fails(j, 36, {"\"intermediate_size\" has the wrong type"});
  j = gpt_oss_draft();
  j["num_key_value_heads"] = 5;
  expect_fails(j, 36, {"num_attention_heads", "num_key_value_heads"});
  j = gpt_oss_draft();
  j["draft_vocab_size"] = 300000;
  expect_fails(j, 36, {"draft_vocab_size", "exceeds"});
  j = gpt_oss_draft();
  j["num_hidden_layers"] = 2;
  expect_fails(j, 36, {"num_hidden_layers", "one decoder layer"});
  j = gpt_oss_draft();
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  expect_fails(j, 36, {"rope_scaling", "rope_type \"yarn\" is not supported"});
  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}};
  expect_fails(j, 36, {"rope_scaling", "low_freq_factor"});
  j = gpt_oss_draft();
  j["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = {1, 17, 36};
  expect_fails(j, 36, {"eagle_aux_hidden_state_layer_ids", "layer 36", "36 layers"});
  j["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = {17, 1, 33};
  expect_fails(j, 36, {"ascending"});
  j = gpt_oss_draft();
  j["eagle_config"]["norm_output"] = true;
  expect_fails(j, 36, {"norm_output", "not supported"});
}

TEST(Eagle3Config, SizesAreBoundedAndIntegersChecked) {
  json j = gpt_oss_draft();
  j["hidden_size"] = 1000000000;
  expect_fails(j, 36, {"draft/config.json: hidden_size = 1000000000 is out of range (1..65536)"});
  j = gpt_oss_draft();
  j["vocab_size"] = 4294967297ull;  // 2^32 + 1: not 1
  expect_fails(j, 36, {"draft/config.json: vocab_size = 4294967297 is out of range"});
  j = gpt_oss_draft();
  j["num_attention_heads"] = 64.5;
  expect_fails(j, 36, {"draft/config.json: num_attention_heads = 64.5 is not an integer"});
  j = gpt_oss_draft();
  j["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = {1, "17", 33};
  expect_fails(j, 36, {"\"eagle_aux_hidden_state_layer_ids[1]\" has the wrong type (\"17\")"});
  j = gpt_oss_draft();
  j["rope_theta"] = 1e300;
  expect_fails(j, 36, {"rope_theta = 1e+300 is out of range"});
}

TEST(Eagle3Config, WrittenLayoutReadsBack) {
  Eagle3Config c = parse_eagle3_config(gpt_oss_draft(), "x", 36);
  Eagle3Config back = parse_eagle3_config(to_eagle3_config_json(c), "y", 36);
  EXPECT_EQ(back.aux_layer_ids, c.aux_layer_ids);
  EXPECT_EQ(back.norm_before_fc, c.norm_before_fc);
  EXPECT_EQ(back.draft_vocab_size, c.draft_vocab_size);
  EXPECT_EQ(back.head_dim, c.head_dim);
  EXPECT_TRUE(to_eagle3_config_json(c)["eagle_config"]["norm_before_fc"].get<bool>());
}

}  // namespace
}  // namespace moeserve::speculative

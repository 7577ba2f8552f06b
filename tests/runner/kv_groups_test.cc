// KV groups describe what a token costs per layer of each group, and the runners size their pool blocks from that
// (issue 16): GPT-OSS's sliding and full layers each keep K and V heads; DeepSeek's MLA keeps one latent of
// kv_lora_rank + qk_rope_head_dim values that serves as both.
#include <gtest/gtest.h>

#include "deepseek_test_util.h"
#include "model/gpt_oss/checkpoint.h"
#include "runner/cpu/cpu_runner.h"
#include "runner/cpu/deepseek_v3_runner.h"
#include "test_util.h"
#include "util/error.h"

namespace moeserve {
namespace {

TEST(KvGroups, GptOssKeepsKAndVHeadsOnItsSlidingAndFullLayers) {
  auto checkpoint = std::shared_ptr<const Checkpoint>(Checkpoint::open(testing::tiny_model()));
  const ModelConfig& c = checkpoint->config();
  const KvGroups groups = kv_groups_of(c);
  ASSERT_EQ(groups.num_groups(), 2);  // GPT-OSS alternates sliding and full attention
  EXPECT_NE(groups.kind_of_group[0], groups.kind_of_group[1]);
  int layers = 0;
  for (int g = 0; g < 2; ++g) {
    EXPECT_EQ(groups.values_per_token_of_group[g], 2 * c.num_kv_heads * c.head_dim) << "group " << g;
    layers += groups.layers_in_group[g];
  }
  EXPECT_EQ(layers, c.num_layers);
  // A pool block holds, for the group with the most layers, K and V of every token: floats on the CPU runner.
  const CpuRunner runner(checkpoint, 1);
  EXPECT_EQ(runner.kv_block_bytes(16), static_cast<size_t>(groups.max_layers_per_group()) * 16 * 2 * c.num_kv_heads *
                                           c.head_dim * sizeof(float));
  EXPECT_EQ(groups.block_bytes(16, 2), runner.kv_block_bytes(16) / 2);  // bf16 on the CUDA runner
}

TEST(KvGroups, DeepseekKeepsOneLatentATokenALayer) {
  const auto checkpoint = testing::small_deepseek_checkpoint();
  const deepseek_v3::Config& c = checkpoint->config();
  const DeepseekV3CpuRunner runner(checkpoint, 1);
  const KvGroups groups = kv_groups_of(runner.config());
  ASSERT_EQ(groups.num_groups(), 1);  // every layer full attention
  EXPECT_EQ(groups.layers_in_group[0], c.num_layers);
  EXPECT_EQ(groups.values_per_token_of_group[0], c.kv_lora_rank + c.qk_rope_head_dim);  // no separate V
  EXPECT_EQ(runner.kv_block_bytes(16),
            static_cast<size_t>(c.num_layers) * 16 * (c.kv_lora_rank + c.qk_rope_head_dim) * sizeof(float));
}

TEST(KvGroups, AConfigOutsideOneOrTwoKvTensorsIsRefused) {
  auto checkpoint = std::shared_ptr<const Checkpoint>(Checkpoint::open(testing::tiny_model()));
  ModelConfig c = checkpoint->config();
  c.kv_tensors = 3;
  try {
    c.validate("config.json");
    ADD_FAILURE() << "kv_tensors 3 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("kv_tensors"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace moeserve

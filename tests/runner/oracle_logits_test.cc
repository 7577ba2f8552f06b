// The CPU runner against transformers' GptOssForCausalLM (tests/fixtures/oracle, written by tools/oracle): logits
// at every position, for single prompts (one shot and in chunks over scattered KV blocks) and a batch of different
// lengths, and greedy continuations.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "engine/generate.h"
#include "model/gpt_oss/checkpoint.h"
#include "runner/cpu/cpu_runner.h"
#include "runner/oracle_fixture.h"
#include "test_util.h"

namespace moeserve {
namespace {

const testing::OracleFixture& fixture() {
  const testing::OracleFixture* f = testing::oracle_fixture("oracle_logits");
  if (f == nullptr) throw std::runtime_error("tests/fixtures/oracle/oracle_logits.{json,bin} are missing");
  return *f;
}

class OracleTest : public ::testing::TestWithParam<std::string> {};

TEST_P(OracleTest, LogitsMatchTransformersEverywhere) {
  const auto& model = fixture().meta["models"][GetParam()];
  auto checkpoint = std::shared_ptr<const Checkpoint>(Checkpoint::open(testing::regenerate_oracle_checkpoint(model)));
  CpuRunner runner(checkpoint, 2);
  const int vocab = checkpoint->config().vocab_size;
  const int groups = kv_groups_of(checkpoint->config()).num_groups();
  const int block_size = 8;
  const std::vector<int32_t> ids = testing::oracle_logit_ids(model);

  for (const auto& c : model["cases"])
    testing::expect_oracle_case(runner, fixture(), testing::read_oracle_case(c), groups, block_size, vocab, ids,
                                GetParam() + "/" + c["name"].get<std::string>());
}

TEST_P(OracleTest, GreedyContinuationsMatchTransformers) {
  const auto& model = fixture().meta["models"][GetParam()];
  auto checkpoint = std::shared_ptr<const Checkpoint>(Checkpoint::open(testing::regenerate_oracle_checkpoint(model)));
  CpuRunner runner(checkpoint, 2);
  for (const auto& g : model["greedy"]) {
    GenerateOptions options;
    options.sampling.temperature = 0.0f;
    options.max_tokens = static_cast<int>(g["tokens"].size());
    ASSERT_GE(options.max_tokens, 32);
    auto result = generate_sequence(runner, g["prompt"].get<std::vector<int32_t>>(), options);
    EXPECT_EQ(result.tokens, g["tokens"].get<std::vector<int32_t>>());
  }
}

INSTANTIATE_TEST_SUITE_P(Models, OracleTest, ::testing::Values("tiny", "tiny-small-vocab"),
                         [](const auto& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

}  // namespace
}  // namespace moeserve

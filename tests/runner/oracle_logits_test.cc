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

  for (const auto& c : model["cases"]) {
    testing::OracleCase oc = testing::read_oracle_case(c);
    const std::string name = c["name"];
    const int n = static_cast<int>(oc.prompts.size());
    int longest = 0;
    for (const auto& p : oc.prompts) longest = std::max(longest, static_cast<int>(p.size()));
    const int blocks_each = (longest + block_size - 1) / block_size;
    runner.allocate_kv_cache({block_size, static_cast<int64_t>(n) * groups * blocks_each});

    // Every sequence of the case in one batch, all positions' logits.
    testing::ScatteredTables tables(n, groups, blocks_each, 7);
    ForwardBatch batch;
    for (int s = 0; s < n; ++s) {
      SequenceStep step;
      step.tokens = oc.prompts[s];
      step.block_tables = tables.spans(s);
      step.num_logits = static_cast<int32_t>(oc.prompts[s].size());
      batch.sequences.push_back(step);
    }
    ForwardOutput out;
    runner.forward(batch, out);
    int64_t row = 0;
    for (int s = 0; s < n; ++s) {
      testing::expect_oracle_rows(fixture(), out.logits, row, oc.prompts[s].size(), vocab, ids, oc.offsets[s],
                                  oc.argmax[s], GetParam() + "/" + name + " batched");
      row += oc.prompts[s].size();
    }

    // Each sequence alone in chunks of 5 over differently scattered blocks: prefix KV read back from the pages.
    testing::ScatteredTables other(n, groups, blocks_each, 11);
    for (int s = 0; s < n; ++s) {
      std::vector<float> logits;
      const auto& prompt = oc.prompts[s];
      for (size_t begin = 0; begin < prompt.size(); begin += 5) {
        size_t end = std::min(prompt.size(), begin + 5);
        ForwardBatch chunk;
        SequenceStep step;
        step.tokens = std::span(prompt).subspan(begin, end - begin);
        step.start_position = static_cast<int32_t>(begin);
        step.block_tables = other.spans(s);
        step.num_logits = static_cast<int32_t>(end - begin);
        chunk.sequences.push_back(step);
        runner.forward(chunk, out);
        logits.insert(logits.end(), out.logits.begin(), out.logits.end());
      }
      testing::expect_oracle_rows(fixture(), logits, 0, prompt.size(), vocab, ids, oc.offsets[s], oc.argmax[s],
                                  GetParam() + "/" + name + " chunked");
    }
  }
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

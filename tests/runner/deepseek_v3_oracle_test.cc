// The DeepSeek-V3 CPU runner and MTP drafter against transformers (tests/fixtures/oracle/deepseek_v3_logits.*,
// written on the GPU host by tools/oracle/run_deepseek_on_device.sh): YaRN frequencies and scales, logits at every
// position in both MLA forms (single prompts in one shot and in chunks over scattered blocks, a batch of lengths),
// greedy continuations of 32 tokens, and the MTP head's logits and chain against one assembled from transformers'
// modules. Skipped, saying so, until the fixture is there.
#include <gtest/gtest.h>

#include <cmath>

#include "engine/generate.h"
#include "runner/cpu/deepseek_v3_runner.h"
#include "runner/cpu/mtp_drafter.h"
#include "runner/eagle3_tree.h"
#include "runner/oracle_fixture.h"
#include "test_util.h"

namespace moeserve {
namespace {

constexpr const char* kFixture = "deepseek_v3_logits";

class DeepseekOracleTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    fixture_ = testing::oracle_fixture(kFixture);
    if (fixture_ == nullptr)
      GTEST_SKIP() << "tests/fixtures/oracle/deepseek_v3_logits.{json,bin} are not there yet: they are written on the "
                      "GPU host by tools/oracle/run_deepseek_on_device.sh";
    ASSERT_TRUE(fixture_->meta["models"].contains(GetParam())) << GetParam() << " is not in the fixture";
    model_ = &fixture_->meta["models"][GetParam()];
    checkpoint_ = std::shared_ptr<const deepseek_v3::Checkpoint>(
        deepseek_v3::Checkpoint::open(testing::regenerate_oracle_checkpoint(*model_, " --family deepseek-v3")));
    ids_ = testing::oracle_logit_ids(*model_);
  }

  const testing::OracleFixture* fixture_ = nullptr;
  const nlohmann::json* model_ = nullptr;
  std::shared_ptr<const deepseek_v3::Checkpoint> checkpoint_;
  std::vector<int32_t> ids_;
};

TEST_P(DeepseekOracleTest, RopeAndScalesMatchTransformers) {
  const deepseek_v3::Config& c = checkpoint_->config();
  const auto hf_inv = (*model_)["rope"]["inv_freq"].get<std::vector<double>>();
  const std::vector<float> inv = c.rope_inverse_frequencies();
  ASSERT_EQ(inv.size(), hf_inv.size());
  for (size_t j = 0; j < inv.size(); ++j) EXPECT_NEAR(inv[j], hf_inv[j], 1e-6 * hf_inv[j]) << "inv_freq " << j;
  EXPECT_NEAR(c.rope_attention_factor(), (*model_)["rope"]["attention_scaling"].get<double>(), 1e-6);
  EXPECT_NEAR(c.softmax_scale(), (*model_)["rope"]["softmax_scale"].get<double>(), 1e-7);
}

TEST_P(DeepseekOracleTest, LogitsMatchTransformersEverywhere) {
  const int vocab = checkpoint_->config().vocab_size;
  constexpr int kBlockSize = 8;
  for (cpu::MlaForm form : {cpu::MlaForm::naive, cpu::MlaForm::absorbed}) {
    DeepseekV3CpuRunner runner(checkpoint_, 2, form);
    const std::string label = GetParam() + (form == cpu::MlaForm::naive ? " naive/" : " absorbed/");
    for (const auto& c : (*model_)["cases"])
      testing::expect_oracle_case(runner, *fixture_, testing::read_oracle_case(c), 1, kBlockSize, vocab, ids_,
                                  label + c["name"].get<std::string>());
  }
}

TEST_P(DeepseekOracleTest, GreedyContinuationsMatchTransformers) {
  DeepseekV3CpuRunner runner(checkpoint_, 2);
  for (const auto& g : (*model_)["greedy"]) {
    GenerateOptions options;
    options.sampling.temperature = 0.0f;
    options.max_tokens = static_cast<int>(g["tokens"].size());
    ASSERT_GE(options.max_tokens, 32);
    const auto result = generate_sequence(runner, g["prompt"].get<std::vector<int32_t>>(), options);
    EXPECT_EQ(result.tokens, g["tokens"].get<std::vector<int32_t>>());
  }
}

TEST_P(DeepseekOracleTest, MtpDraftsMatchTransformersModules) {
  const deepseek_v3::Config& c = checkpoint_->config();
  const int vocab = c.vocab_size;
  const int64_t H = c.hidden_size;
  const bool all_ids = static_cast<int>(ids_.size()) == vocab;
  for (const auto& item : (*model_)["mtp"]) {
    const std::vector<int32_t> prompt = item["prompt"].get<std::vector<int32_t>>();
    const int32_t n = static_cast<int32_t>(prompt.size());
    // The target's features: its residual stream after the last layer, and its greedy next token.
    DeepseekV3CpuRunner runner(checkpoint_, 2);
    runner.allocate_kv_cache({8, (n + 7) / 8});
    std::vector<int32_t> table((n + 7) / 8);
    std::iota(table.begin(), table.end(), 0);
    ForwardBatch batch;
    SequenceStep step;
    step.tokens = prompt;
    step.block_tables.emplace_back(table);
    batch.sequences.push_back(step);
    batch.capture_layers = {c.num_layers - 1};
    ForwardOutput out;
    runner.forward(batch, out);
    const int32_t next = static_cast<int32_t>(std::max_element(out.logits.begin(), out.logits.end()) - out.logits.begin());
    ASSERT_EQ(next, item["next_token"].get<int32_t>());
    std::vector<int32_t> next_tokens(prompt.begin() + 1, prompt.end());
    next_tokens.push_back(next);
    speculative::DraftInput in;
    in.sequence_id = 1;
    in.start_token = prompt[0];
    in.features = out.captured[0];
    in.next_tokens = next_tokens;
    ASSERT_EQ(static_cast<int64_t>(in.features.size()), n * H);

    speculative::MtpDrafter extending(checkpoint_, speculative::MtpDrafterOptions{8, 16, 2});
    const std::vector<float> logits = extending.extend_logits(std::span(&in, 1));
    testing::expect_oracle_rows(*fixture_, logits, 0, n, vocab, ids_, item["offset"].get<int64_t>(),
                                item["argmax"].get<std::vector<int32_t>>(), GetParam() + " MTP extend");

    // A chain of 3 fed back the module's own normed output: transformers' modules drafted the same tokens, with
    // the same log-probabilities where the fixture holds whole rows.
    speculative::MtpDrafter chaining(checkpoint_, speculative::MtpDrafterOptions{8, 16, 2});
    in.shape = {static_cast<int>(item["chain"].size()), 1, 0};
    std::vector<speculative::DraftTree> drafts;
    std::vector<std::vector<float>> scores;
    chaining.propose_scored(std::span(&in, 1), drafts, &scores);
    // Draft k's log-probability comes from the logits before it: the last extended row's, then each link's.
    double cumulative = 0;
    int64_t before = item["offset"].get<int64_t>() + static_cast<int64_t>(n - 1) * static_cast<int64_t>(ids_.size());
    for (size_t k = 0; k < item["chain"].size(); ++k) {
      const auto& link = item["chain"][k];
      const int32_t token = link["token"].get<int32_t>();
      EXPECT_EQ(drafts[0].tokens[k], token) << "draft " << k;
      if (all_ids) {
        std::vector<float> row(fixture_->values.begin() + before, fixture_->values.begin() + before + vocab);
        speculative::log_softmax(row);
        cumulative += row[token];
        EXPECT_NEAR(scores[0][k], cumulative, 1e-3 * std::max(1.0, std::fabs(cumulative))) << "draft " << k;
      }
      before = link["offset"].get<int64_t>();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Models, DeepseekOracleTest, ::testing::Values("tiny", "tiny-small-vocab"),
                         [](const auto& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

}  // namespace
}  // namespace moeserve

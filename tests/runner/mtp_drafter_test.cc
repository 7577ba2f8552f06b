// DeepSeek's MTP module as a drafter against the double-precision re-computation (deepseek_v3_reference.h) on
// the target's real hidden states: the logits of the extended positions, a chain fed back its own normed state,
// and its mechanics (the same drafts in any batch, rollback equal to a fresh drafter, a checkpoint without MTP).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "deepseek_test_util.h"
#include "runner/cpu/mtp_drafter.h"
#include "runner/deepseek_v3_reference.h"
#include "runner/eagle3_tree.h"
#include "runner/mtp_inputs.h"
#include "util/error.h"

namespace moeserve::speculative {
namespace {

using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

std::shared_ptr<const deepseek_v3::Checkpoint> checkpoint() { return moeserve::testing::small_deepseek_checkpoint(); }

// Prompts run through the target (the drafter's features) and slices of them as inputs (mtp_inputs.h).
using Verified = moeserve::testing::VerifiedTokens;
Verified verified(int n, uint32_t seed) { return moeserve::testing::verified_tokens(checkpoint(), n, seed); }
DraftInput input(const Verified& v, uint64_t id, int start, int end, DraftShape shape) {
  return moeserve::testing::draft_input(v, checkpoint()->config().hidden_size, id, start, end, shape);
}

std::unique_ptr<MtpDrafter> drafter(cpu::MlaForm form = cpu::MlaForm::absorbed) {
  return std::make_unique<MtpDrafter>(checkpoint(), MtpDrafterOptions{16, 32, 2, form});
}

TEST(MtpDrafter, ExtendedPositionsMatchTheReference) {
  const Verified v = verified(23, 1);
  const std::vector<int32_t> next(v.tokens.begin() + 1, v.tokens.end());
  const testing::ReferenceOutput target = testing::reference_forward(*checkpoint(), {v.tokens.begin(), v.tokens.end() - 1});
  const testing::Rows ref = testing::reference_mtp(*checkpoint(), target.hidden, next);
  for (cpu::MlaForm form : {cpu::MlaForm::naive, cpu::MlaForm::absorbed}) {
    const auto d = drafter(form);
    const DraftInput in = input(v, 1, 0, 23, {});
    const std::vector<float> logits = d->extend_logits(std::span(&in, 1));
    EXPECT_LE(testing::worst_relative_error(logits, 23, ref), 1e-5);
  }
}

TEST(MtpDrafter, ChainFeedsBackItsOwnNormedState) {
  const Verified v = verified(17, 2);
  const auto d = drafter();
  const DraftInput in = input(v, 1, 0, 17, {3, 1, 0});
  std::vector<DraftTree> out;
  std::vector<std::vector<float>> scores;
  d->propose_scored(std::span(&in, 1), out, &scores);
  ASSERT_EQ(out[0].tokens.size(), 3u);
  EXPECT_EQ(out[0].parent, (std::vector<int32_t>{-1, 0, 1}));

  // The reference: position i takes the target's normed hidden state, then the module's own output.
  testing::Rows hidden = testing::reference_forward(*checkpoint(), {v.tokens.begin(), v.tokens.end() - 1}).hidden;
  std::vector<int32_t> next(v.tokens.begin() + 1, v.tokens.end());
  double cumulative = 0;
  for (int step = 0; step < 3; ++step) {
    testing::Rows mtp_hidden;
    const testing::Rows logits = testing::reference_mtp(*checkpoint(), hidden, next, &mtp_hidden);
    std::vector<float> row(logits.back().begin(), logits.back().end());
    log_softmax(row);
    const int32_t best = static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
    cumulative += row[best];
    EXPECT_EQ(out[0].tokens[step], best) << "step " << step;
    EXPECT_NEAR(scores[0][step], cumulative, 1e-4) << "step " << step;
    hidden.push_back(mtp_hidden.back());
    next.push_back(best);
  }
}

TEST(MtpDrafter, TheSameDraftsAloneAndInABatch) {
  const Verified a = verified(20, 3), b = verified(9, 4);
  const auto alone = drafter(), batched = drafter();
  const DraftShape tree{3, 2, 5};
  const DraftInput ia = input(a, 1, 0, 20, tree), ib = input(b, 2, 0, 9, {2, 1, 0});
  std::vector<DraftTree> one, both;
  std::vector<std::vector<float>> s1, s2;
  alone->propose_scored(std::span(&ia, 1), one, &s1);
  const std::vector<DraftInput> inputs{ib, ia};
  batched->propose_scored(inputs, both, &s2);
  EXPECT_EQ(one[0].tokens, both[1].tokens);
  EXPECT_EQ(one[0].parent, both[1].parent);
  EXPECT_EQ(s1[0], s2[1]);
  EXPECT_EQ(one[0].tokens.size(), 5u);
}

TEST(MtpDrafter, RollbackEqualsAFreshDrafterFedTheSameHistory) {
  const Verified v = verified(30, 5);
  const auto used = drafter(), fresh = drafter();
  std::vector<DraftTree> out, expected;
  std::vector<std::vector<float>> scores, expected_scores;
  const DraftInput first = input(v, 7, 0, 30, {2, 1, 0});
  used->propose_scored(std::span(&first, 1), out, &scores);
  EXPECT_EQ(used->cached_positions(7), 30);
  const DraftInput again = input(v, 7, 18, 25, {2, 1, 0});  // the target rolled back to position 18
  used->propose_scored(std::span(&again, 1), out, &scores);
  EXPECT_EQ(used->cached_positions(7), 25);
  const DraftInput history = input(v, 7, 0, 25, {2, 1, 0});
  fresh->propose_scored(std::span(&history, 1), expected, &expected_scores);
  EXPECT_EQ(out[0].tokens, expected[0].tokens);
  EXPECT_EQ(scores[0], expected_scores[0]);
}

TEST(MtpDrafter, ACheckpointWithoutTheMtpLayerCannotDraft) {
  deepseek_v3::TinyOptions o;
  o.vocab = 1024;
  const std::string dir = testing::edited_deepseek_copy(testing::tiny_deepseek_model(o), {}, [](auto& t) {
    std::erase_if(t, [](const TensorToWrite& x) { return x.name.rfind("model.layers.3.", 0) == 0; });
  });
  auto without = std::shared_ptr<const deepseek_v3::Checkpoint>(deepseek_v3::Checkpoint::open(dir));
  EXPECT_THAT([&] { MtpDrafter(without, MtpDrafterOptions{16, 8, 1}); },
              ThrowsMessage<Error>(HasSubstr("no MTP layer (model.layers.3.*) to draft with")));
  EXPECT_THAT([&] { MtpDrafter(checkpoint(), MtpDrafterOptions{16, 0, 1}); },
              ThrowsMessage<Error>(HasSubstr("MTP drafter: KV pool needs a positive block size and count")));
}

}  // namespace
}  // namespace moeserve::speculative

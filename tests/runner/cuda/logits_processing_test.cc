// The GPU's logits processing and logprobs (runner/cuda/logits_processing.cu) against the CPU references
// (apply_logit_edits, token_logprobs) on fresh random rows of the full 201,088-token vocabulary: edited rows are
// bitwise the CPU's (the same float operations on each logit), each edited token's raw logit is kept, the top k
// (0, 1, 5, 20) are the CPU's tokens in the CPU's order with logprobs within 1e-5, and a drawn token's logprob is
// taken at its raw logit even when an edit changed it. Skips without a CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "cuda_test_util.h"
#include "sampling/logits_processing.h"
#include "sampling/logprobs.h"
#include "runner/cuda/logits_processing.h"

namespace moeserve {
namespace {

using cuda::DeviceBuffer;

constexpr int kVocab = 201088;

TEST(CudaLogitsProcessing, EditsMasksAndLogprobsMatchTheCpu) {
  MOESERVE_REQUIRE_CUDA();
  std::mt19937 rng(17);
  constexpr int kRows = 8;
  std::vector<float> logits;
  for (int r = 0; r < kRows; ++r) {
    auto row = testing::random_floats(rng, kVocab, 0.0f, 3.0f);
    if (r == 3) std::fill(row.begin() + 100, row.begin() + 200, 5.0f);  // ties at the top
    logits.insert(logits.end(), row.begin(), row.end());
  }
  // Edits for every other row (penalties over a random history, biases, a ban), a mask for rows 2 and 6.
  std::uniform_int_distribution<int32_t> token(0, kVocab - 1);
  std::vector<cuda::EditRow> edit_rows;
  std::vector<LogitEdit> edits;
  std::vector<uint32_t> masks;
  std::vector<std::vector<LogitEdit>> row_edits(kRows);
  std::vector<std::vector<uint32_t>> row_masks(kRows);
  for (int r = 0; r < kRows; r += 2) {
    LogitsProcessing p;
    p.repetition_penalty = 1.3f;
    p.frequency_penalty = 0.4f;
    p.presence_penalty = -0.6f;
    p.logit_bias = {{token(rng), 50.0f}};
    std::vector<int32_t> prompt(300);
    for (auto& t : prompt) t = token(rng);
    TokenHistory history(prompt);
    for (int i = 0; i < 200; ++i) history.add_output(prompt[i % 37]);
    const std::vector<int32_t> banned = {token(rng)};
    row_edits[r] = logit_edits(p, history, banned);
    cuda::EditRow row{r, static_cast<int32_t>(edits.size()), static_cast<int32_t>(row_edits[r].size()), -1};
    edits.insert(edits.end(), row_edits[r].begin(), row_edits[r].end());
    if (r % 4 == 2) {
      row_masks[r].assign((kVocab + 31) / 32, 0);
      for (int i = 0; i < 5000; ++i) {
        const int32_t t = token(rng);
        row_masks[r][t / 32] |= 1u << (t % 32);
      }
      row.mask_offset = static_cast<int64_t>(masks.size());
      masks.insert(masks.end(), row_masks[r].begin(), row_masks[r].end());
    }
    edit_rows.push_back(row);
  }
  // Logprobs for every row: given tokens for odd rows, the "drawn" token (an edited one where there are edits)
  // for even rows.
  const int top_ks[] = {0, 1, 5, 20};
  std::vector<cuda::LogprobRow> logprob_rows;
  std::vector<int32_t> sampled(kRows, 0);
  for (int r = 0; r < kRows; ++r) {
    const bool drawn = r % 2 == 0;
    if (drawn) sampled[r] = row_edits[r].front().token;
    const int32_t first = drawn ? edit_rows[r / 2].first_edit : 0, count = drawn ? edit_rows[r / 2].num_edits : 0;
    logprob_rows.push_back({r, drawn ? -1 : token(rng), top_ks[r % 4], first, count});
  }

  DeviceBuffer logits_d = cuda::to_device(logits), edit_rows_d = cuda::to_device(edit_rows),
               edits_d = cuda::to_device(edits), masks_d = cuda::to_device(masks.empty() ? std::vector<uint32_t>{0} : masks),
               rows_d = cuda::to_device(logprob_rows), sampled_d = cuda::to_device(sampled);
  DeviceBuffer originals_d(edits.size() * sizeof(float)), results_d(kRows * sizeof(cuda::LogprobResult));
  cuda::launch_row_logprobs(nullptr, logits_d.as<float>(), kVocab, rows_d.as<cuda::LogprobRow>(), kRows,
                            results_d.as<cuda::LogprobResult>());
  cuda::launch_logit_edits(nullptr, logits_d.as<float>(), kVocab, edit_rows_d.as<cuda::EditRow>(),
                           static_cast<int>(edit_rows.size()), edits_d.as<LogitEdit>(), masks_d.as<uint32_t>(),
                           originals_d.as<float>());
  cuda::launch_chosen_logprobs(nullptr, logits_d.as<float>(), kVocab, rows_d.as<cuda::LogprobRow>(), kRows,
                               edits_d.as<LogitEdit>(), originals_d.as<float>(), sampled_d.as<int32_t>(),
                               results_d.as<cuda::LogprobResult>());
  std::vector<float> edited(logits.size()), originals(edits.size());
  std::vector<cuda::LogprobResult> results(kRows);
  MOESERVE_CUDA_CHECK(cudaMemcpy(edited.data(), logits_d.get(), edited.size() * 4, cudaMemcpyDeviceToHost));
  MOESERVE_CUDA_CHECK(cudaMemcpy(originals.data(), originals_d.get(), originals.size() * 4, cudaMemcpyDeviceToHost));
  MOESERVE_CUDA_CHECK(
      cudaMemcpy(results.data(), results_d.get(), kRows * sizeof(cuda::LogprobResult), cudaMemcpyDeviceToHost));

  for (int r = 0; r < kRows; ++r) {
    SCOPED_TRACE("row " + std::to_string(r));
    const std::span<const float> raw(logits.data() + static_cast<size_t>(r) * kVocab, kVocab);
    std::vector<float> want(raw.begin(), raw.end());
    apply_logit_edits(want, row_edits[r], row_masks[r]);
    EXPECT_TRUE(std::equal(want.begin(), want.end(), edited.begin() + static_cast<size_t>(r) * kVocab));
    if (r % 2 == 0) {
      for (int j = 0; j < edit_rows[r / 2].num_edits; ++j)
        EXPECT_EQ(originals[edit_rows[r / 2].first_edit + j], raw[row_edits[r][j].token]);
    }
    const int32_t chosen = r % 2 == 0 ? sampled[r] : logprob_rows[r].token;
    const TokenLogprobs cpu = token_logprobs(raw, chosen, top_ks[r % 4]);
    EXPECT_NEAR(results[r].log_sum_exp, log_sum_exp(raw), 1e-9 * std::abs(log_sum_exp(raw)));
    EXPECT_EQ(results[r].token, chosen);
    EXPECT_NEAR(results[r].logprob, cpu.chosen.logprob, 1e-5);
    for (int j = 0; j < top_ks[r % 4]; ++j) {
      EXPECT_EQ(results[r].top_tokens[j], cpu.top[j].token) << "top " << j;
      EXPECT_NEAR(results[r].top_logprobs[j], cpu.top[j].logprob, 1e-5) << "top " << j;
    }
  }
}

}  // namespace
}  // namespace moeserve

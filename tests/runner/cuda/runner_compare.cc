#include "runner_compare.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <random>

#include "cuda_test_util.h"

namespace moeserve::testing {

TinyModelOptions full_width_two_layers() {
  TinyModelOptions o;
  o.layers = 2;
  o.hidden = 2880;
  o.heads = 64;
  o.kv_heads = 8;
  o.head_dim = 64;
  o.experts = 32;
  o.top_k = 4;
  o.intermediate = 2880;
  o.window = 128;
  return o;
}

ProcessedRowsStep::ProcessedRowsStep(int vocab, int groups, int blocks_each, int32_t forced)
    : prompts{prompt(20, 1, vocab), prompt(9, 2, vocab), prompt(17, 3, vocab)},
      tables(3, std::vector<std::vector<int32_t>>(groups)),
      force{{forced, 100.0f, 1.0f, 0.0f}},
      mask((vocab + 31) / 32, 0),
      scored(prompts[2].begin() + 1, prompts[2].end()) {
  for (int s = 0; s < 3; ++s)
    for (int g = 0; g < groups; ++g)
      for (int b = 0; b < blocks_each; ++b) tables[s][g].push_back((s * groups + g) * blocks_each + b);
  greedy.temperature = 0.0f;
  sampled.seed = 99;
  std::mt19937 rng(4);
  for (int i = 0; i < 64; ++i) {
    const int32_t t = std::uniform_int_distribution<int32_t>(0, vocab - 1)(rng);
    mask[t / 32] |= 1u << (t % 32);
  }
  scored.push_back(-1);  // the last row draws
  batch.return_logits = false;
  for (int s = 0; s < 3; ++s) {
    SequenceStep step;
    step.tokens = prompts[s];
    for (const auto& t : tables[s]) step.block_tables.emplace_back(t);
    step.num_logits = s == 2 ? static_cast<int32_t>(prompts[s].size()) : 1;
    step.top_logprobs = 5;
    step.sampling = s == 0 ? &greedy : &sampled;
    if (s == 0) step.logit_edits = force;
    if (s == 1) step.allowed_tokens = mask;
    if (s == 2) step.logprob_tokens = scored;
    batch.sequences.push_back(step);
  }
}

void expect_logprobs_match(const ForwardOutput& got, const ForwardOutput& want) {
  ASSERT_EQ(got.rows, want.rows);
  ASSERT_EQ(got.logprobs.size(), want.logprobs.size());
  EXPECT_EQ(got.sampled, want.sampled);
  for (int64_t r = 0; r < want.rows; ++r) {
    SCOPED_TRACE("row " + std::to_string(r));
    EXPECT_EQ(got.logprobs[r].chosen.token, want.logprobs[r].chosen.token);
    EXPECT_NEAR(got.logprobs[r].chosen.logprob, want.logprobs[r].chosen.logprob, 1e-3);
    ASSERT_EQ(got.logprobs[r].top.size(), 5u);
    for (int j = 0; j < 5; ++j) {
      EXPECT_EQ(got.logprobs[r].top[j].token, want.logprobs[r].top[j].token) << j;
      EXPECT_NEAR(got.logprobs[r].top[j].logprob, want.logprobs[r].top[j].logprob, 1e-3) << j;
    }
  }
}

std::vector<int32_t> prompt(int length, int salt, int vocab) {
  std::vector<int32_t> tokens(length);
  for (int i = 0; i < length; ++i) tokens[i] = static_cast<int32_t>((1000003LL * (i + 1) * (salt + 7) + 17 * salt) % vocab);
  return tokens;
}

ForwardBatch one_sequence_step(const std::vector<int32_t>& tokens, int start, int count,
                               const std::vector<int32_t>& table) {
  ForwardBatch batch;
  SequenceStep step;
  step.tokens = std::span(tokens).subspan(start, count);
  step.start_position = start;
  step.block_tables = {table};
  batch.sequences.push_back(step);
  return batch;
}

AllLogits run_prompts(ModelRunner& runner, const std::vector<std::vector<int32_t>>& prompts, int chunk) {
  const int groups = kv_groups_of(runner.config()).num_groups(), block_size = 8;
  int longest = 0;
  for (const auto& p : prompts) longest = std::max(longest, static_cast<int>(p.size()));
  const int blocks_each = (longest + block_size - 1) / block_size;
  const int n = static_cast<int>(prompts.size());
  runner.allocate_kv_cache({block_size, static_cast<int64_t>(n) * groups * blocks_each});
  auto tables_for = [&](uint32_t seed) {
    std::vector<int32_t> pool(n * groups * blocks_each);
    std::iota(pool.begin(), pool.end(), 0);
    std::shuffle(pool.begin(), pool.end(), std::mt19937(seed));
    std::vector<std::vector<std::vector<int32_t>>> tables(n, std::vector<std::vector<int32_t>>(groups));
    size_t next = 0;
    for (auto& seq : tables)
      for (auto& table : seq) table.assign(pool.begin() + next, pool.begin() + next + blocks_each), next += blocks_each;
    return tables;
  };
  auto spans = [](const std::vector<std::vector<int32_t>>& seq) {
    std::vector<std::span<const int32_t>> out;
    for (const auto& t : seq) out.emplace_back(t);
    return out;
  };
  AllLogits result;
  const auto tables = tables_for(3);
  ForwardBatch batch;
  for (int s = 0; s < n; ++s) {
    SequenceStep step;
    step.tokens = prompts[s];
    step.block_tables = spans(tables[s]);
    step.num_logits = static_cast<int32_t>(prompts[s].size());
    batch.sequences.push_back(step);
  }
  ForwardOutput out;
  runner.forward(batch, out);
  result.batched = out.logits;
  const auto other = tables_for(5);
  for (int s = 0; s < n; ++s)
    for (size_t begin = 0; begin < prompts[s].size(); begin += chunk) {
      const size_t end = std::min(prompts[s].size(), begin + chunk);
      ForwardBatch step_batch;
      SequenceStep step;
      step.tokens = std::span(prompts[s]).subspan(begin, end - begin);
      step.start_position = static_cast<int32_t>(begin);
      step.block_tables = spans(other[s]);
      step.num_logits = static_cast<int32_t>(end - begin);
      step_batch.sequences.push_back(step);
      runner.forward(step_batch, out);
      result.chunked.insert(result.chunked.end(), out.logits.begin(), out.logits.end());
    }
  return result;
}

RowErrors row_errors(const std::vector<float>& out, const std::vector<float>& ref, int vocab) {
  EXPECT_EQ(out.size(), ref.size());
  std::vector<double> errors;
  for (size_t row = 0; (row + 1) * vocab <= std::min(out.size(), ref.size()); ++row) {
    std::vector<float> a(out.begin() + row * vocab, out.begin() + (row + 1) * vocab),
        b(ref.begin() + row * vocab, ref.begin() + (row + 1) * vocab);
    errors.push_back(relative_error(a, b));
  }
  RowErrors e;
  e.rows = static_cast<int>(errors.size());
  if (errors.empty()) return e;
  std::sort(errors.begin(), errors.end());
  e.worst = errors.back();
  e.median = errors[errors.size() / 2];
  e.above_5e2 = static_cast<int>(std::count_if(errors.begin(), errors.end(), [](double x) { return x > 5e-2; }));
  return e;
}

void expect_logits_close(const std::string& what, const std::string& precision, const std::vector<float>& out,
                         const std::vector<float>& ref, int vocab) {
  const RowErrors e = row_errors(out, ref, vocab);
  std::printf("%s %s: %d rows, median %.3e, worst %.3e, %d rows above 5e-2\n", what.c_str(), precision.c_str(),
              e.rows, e.median, e.worst, e.above_5e2);
  if (precision == "f32") {
    expect_error_within(what + " worst row f32", e.worst, 1e-4);
  } else {
    expect_error_within(what + " median row bf16", e.median, 3e-2);
  }
}

}  // namespace moeserve::testing

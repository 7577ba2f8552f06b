// Logits processing and logprobs against oracles written out here, apart from the code under test:
//  - the edits (logit_bias, min_tokens, repetition / frequency / presence penalties) against vLLM's rules applied
//    token by token over the whole vocabulary, on hand-checked values and on random histories;
//  - logprobs against a long-double log-softmax;
//  - the engine on the CPU runner (tiny model): every generated token's logprobs equal the log-softmax of the
//    runner's own logits for that position (recomputed in one forward over the whole sequence), echoed prompt
//    logprobs likewise; every penalised token is the draw the sampler makes from the oracle's edited logits;
//    min_tokens holds stop tokens back; seeds reproduce alone and in a batch.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <set>

#include "engine/engine_core.h"
#include "engine/engine_harness.h"
#include "sampling/logits_oracle.h"
#include "sampling/logits_processing.h"
#include "sampling/logprobs.h"
#include "sampling/sampler.h"
#include "model/gpt_oss/checkpoint.h"
#include "runner/cpu/cpu_runner.h"
#include "test_util.h"
#include "util/error.h"

namespace moeserve {
namespace {

using testing::log_softmax;
using testing::oracle_edit;

std::vector<float> edited(std::vector<float> logits, const LogitsProcessing& p, const std::vector<int32_t>& prompt,
                          const std::vector<int32_t>& output, std::span<const int32_t> banned) {
  TokenHistory history(prompt);
  for (int32_t t : output) history.add_output(t);
  const auto edits = logit_edits(p, history, banned);
  apply_logit_edits(logits, edits, {});
  return logits;
}

TEST(LogitEdits, HandCheckedValues) {
  // Token 0: in the prompt only (repetition); 1: in the output twice (all three); 2: biased; 3: untouched;
  // 4: banned; 5: negative and in the output once.
  const std::vector<float> logits = {2.0f, 3.0f, 1.0f, 0.5f, 4.0f, -1.0f};
  LogitsProcessing p;
  p.repetition_penalty = 2.0f;
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 0.25f;
  p.logit_bias = {{2, -3.0f}};
  const std::vector<int32_t> banned = {4};
  const auto got = edited(logits, p, {0}, {1, 1, 5}, banned);
  EXPECT_FLOAT_EQ(got[0], 1.0f);                     // 2 / 2
  EXPECT_FLOAT_EQ(got[1], 3.0f / 2 - 2 * 0.5f - 0.25f);
  EXPECT_FLOAT_EQ(got[2], 1.0f - 3.0f);             // bias only: not seen
  EXPECT_FLOAT_EQ(got[3], 0.5f);
  EXPECT_EQ(got[4], -INFINITY);
  EXPECT_FLOAT_EQ(got[5], -1.0f * 2 - 0.5f - 0.25f);  // negative: multiplied
  // Bias is added before the repetition penalty (vLLM: logits processors, then penalties): 1 + 3 = 4 -> 2.
  p.logit_bias = {{0, 3.0f}};
  EXPECT_FLOAT_EQ(edited(logits, p, {0}, {}, {})[0], (2.0f + 3.0f) / 2);
}

TEST(LogitEdits, MatchTheOracleOnRandomHistories) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::uniform_int_distribution<int32_t> token(0, 63);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<float> logits(64);
    for (auto& x : logits) x = normal(rng);
    LogitsProcessing p;
    p.repetition_penalty = std::uniform_real_distribution<float>(0.5f, 2.0f)(rng);
    p.frequency_penalty = std::uniform_real_distribution<float>(-2.0f, 2.0f)(rng);
    p.presence_penalty = std::uniform_real_distribution<float>(-2.0f, 2.0f)(rng);
    std::set<int32_t> biased;
    for (int i = 0; i < 5; ++i) biased.insert(token(rng));
    for (int32_t t : biased) p.logit_bias.emplace_back(t, std::uniform_real_distribution<float>(-100, 100)(rng));
    std::vector<int32_t> prompt(token(rng) % 20), output(token(rng) % 30), stops = {token(rng), token(rng)};
    for (auto& t : prompt) t = token(rng);
    for (auto& t : output) t = token(rng);
    const bool hold = trial % 2 == 0;
    const auto want = oracle_edit(logits, p, prompt, output, hold, stops);
    const auto got = edited(logits, p, prompt, output, hold ? std::span<const int32_t>(stops) : std::span<const int32_t>());
    for (size_t t = 0; t < logits.size(); ++t) EXPECT_FLOAT_EQ(got[t], want[t]) << "trial " << trial << " token " << t;
  }
}

TEST(LogitEdits, AllowedMaskSetsEverythingElseToMinusInfinity) {
  std::vector<float> logits = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24,
                               25, 26, 27, 28, 29, 30, 31, 32, 33, 34};
  const std::vector<uint32_t> mask = {(1u << 3) | (1u << 31), 1u << 1};  // tokens 3, 31, 33
  apply_logit_edits(logits, {}, mask);
  for (size_t t = 0; t < logits.size(); ++t)
    EXPECT_EQ(logits[t], t == 3 || t == 31 || t == 33 ? static_cast<float>(t + 1) : -INFINITY) << t;
}

TEST(LogitEdits, OutOfRangeParametersAreRefused) {
  LogitsProcessing p;
  p.repetition_penalty = 0.0f;
  EXPECT_THROW(validate_logits_processing(p, 10), Error);
  p = {};
  p.presence_penalty = 2.5f;
  EXPECT_THROW(validate_logits_processing(p, 10), Error);
  p = {};
  p.logit_bias = {{10, 1.0f}};
  EXPECT_THROW(validate_logits_processing(p, 10), Error);
  p.logit_bias = {{1, 101.0f}};
  EXPECT_THROW(validate_logits_processing(p, 10), Error);
}

void expect_logprobs_of(std::span<const float> row, const TokenLogprobs& got, int32_t token, int top_k,
                        const std::string& where) {
  const auto want = log_softmax(row);
  EXPECT_EQ(got.chosen.token, token) << where;
  EXPECT_NEAR(got.chosen.logprob, static_cast<double>(want[token]), 2e-5) << where;
  ASSERT_EQ(static_cast<int>(got.top.size()), top_k) << where;
  std::vector<int32_t> order(row.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return row[a] > row[b]; });
  for (int i = 0; i < top_k; ++i) {
    EXPECT_EQ(got.top[i].token, order[i]) << where << " top " << i;
    EXPECT_NEAR(got.top[i].logprob, static_cast<double>(want[order[i]]), 2e-5) << where << " top " << i;
  }
}

TEST(Logprobs, EqualTheLogSoftmaxWithTopTokensByValueThenId) {
  const std::vector<float> row = {1.0f, 3.0f, 2.0f, 3.0f, -50.0f, 0.0f};
  expect_logprobs_of(row, token_logprobs(row, 4, 4), 4, 4, "small row");
  EXPECT_EQ(token_logprobs(row, 0, 2).top[0].token, 1);  // 1 and 3 tie: the lower id first
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 8.0f);
  std::vector<float> wide(201088);
  for (auto& x : wide) x = normal(rng);
  expect_logprobs_of(wide, token_logprobs(wide, 12345, 20), 12345, 20, "vocabulary-wide row");
  EXPECT_THROW(token_logprobs(row, 6, 1), Error);
  EXPECT_THROW(token_logprobs(row, 0, 21), Error);
}

// ---- the engine on the CPU runner ---------------------------------------------------------------------------------

std::shared_ptr<const Checkpoint> tiny_checkpoint() {
  static auto checkpoint = std::shared_ptr<const Checkpoint>(Checkpoint::open(testing::tiny_model()));
  return checkpoint;
}

std::vector<std::vector<float>> logits_at_every_position(const std::vector<int32_t>& tokens) {
  return testing::logits_at_every_position(tiny_checkpoint(), tokens);
}

struct Stream {
  std::vector<int32_t> tokens;
  std::vector<TokenLogprobs> logprobs, prompt_logprobs;
  FinishReason finish = FinishReason::none;
};

// Runs the requests together (ids by index) on a fresh engine over the CPU runner.
std::vector<Stream> run_engine(const std::vector<RequestSpec>& specs, int max_batched_tokens = 64) {
  CpuRunner runner(tiny_checkpoint(), 2);
  EngineConfig config;
  config.block_size = 8;
  config.num_kv_blocks = 512;
  config.scheduler.max_batched_tokens = max_batched_tokens;
  EngineCore core(runner, config);
  std::vector<Stream> out(specs.size());
  for (size_t i = 0; i < specs.size(); ++i)
    core.add_request(i, specs[i], [&out](const RequestEvent& e) {
      Stream& s = out[e.request_id];
      s.tokens.insert(s.tokens.end(), e.tokens.begin(), e.tokens.end());
      s.logprobs.insert(s.logprobs.end(), e.logprobs.begin(), e.logprobs.end());
      s.prompt_logprobs.insert(s.prompt_logprobs.end(), e.prompt_logprobs.begin(), e.prompt_logprobs.end());
      if (e.finish != FinishReason::none) s.finish = e.finish;
    });
  for (int step = 0; core.has_work(); ++step) {
    if (step > 10000) throw std::runtime_error("no progress");
    core.step();
  }
  return out;
}

std::vector<int32_t> random_prompt(uint32_t seed, int n) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> id(0, 199997);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = id(rng);
  return t;
}

TEST(EngineLogprobs, GeneratedAndEchoedPromptLogprobsAreTheLogSoftmaxOfTheRunnersLogits) {
  RequestSpec spec;
  spec.prompt = random_prompt(1, 21);  // over several 8-token blocks and prefill chunks of 16
  spec.max_tokens = 6;
  spec.sampling.seed = 9;
  spec.top_logprobs = 5;
  spec.prompt_logprobs = true;
  const Stream got = run_engine({spec}, 16).at(0);
  ASSERT_EQ(got.tokens.size(), 6u);
  ASSERT_EQ(got.logprobs.size(), 6u);
  ASSERT_EQ(got.prompt_logprobs.size(), spec.prompt.size() - 1);
  std::vector<int32_t> all = spec.prompt;
  all.insert(all.end(), got.tokens.begin(), got.tokens.end());
  const auto rows = logits_at_every_position(all);
  for (size_t i = 1; i < spec.prompt.size(); ++i)
    expect_logprobs_of(rows[i - 1], got.prompt_logprobs[i - 1], spec.prompt[i], 5, "prompt token " + std::to_string(i));
  for (size_t k = 0; k < got.tokens.size(); ++k)
    expect_logprobs_of(rows[spec.prompt.size() - 1 + k], got.logprobs[k], got.tokens[k], 5,
                       "generated token " + std::to_string(k));
}

TEST(EngineLogprobs, ReportedLogprobsAreRawEvenWhenPenaltiesChangeTheDraw) {
  RequestSpec spec;
  spec.prompt = random_prompt(2, 10);
  spec.max_tokens = 5;
  spec.sampling.temperature = 0.0f;
  spec.top_logprobs = 2;
  spec.processing.repetition_penalty = 1.8f;
  spec.processing.logit_bias = {{7, 100.0f}};  // forces token 7 every step: its raw logprob is reported
  const Stream got = run_engine({spec}).at(0);
  std::vector<int32_t> all = spec.prompt;
  all.insert(all.end(), got.tokens.begin(), got.tokens.end());
  const auto rows = logits_at_every_position(all);
  for (size_t k = 0; k < got.tokens.size(); ++k) {
    EXPECT_EQ(got.tokens[k], 7);
    expect_logprobs_of(rows[spec.prompt.size() - 1 + k], got.logprobs[k], 7, 2, "token " + std::to_string(k));
  }
}

// Every token of a processed request is the sampler's draw from the oracle's edit of the raw logits.
void expect_draws_follow_the_oracle(const RequestSpec& spec, const Stream& got) {
  std::vector<int32_t> all = spec.prompt;
  all.insert(all.end(), got.tokens.begin(), got.tokens.end());
  const auto rows = logits_at_every_position(all);
  for (size_t k = 0; k < got.tokens.size(); ++k) {
    const std::vector<int32_t> output(got.tokens.begin(), got.tokens.begin() + k);
    const bool hold = static_cast<int>(k) < spec.processing.min_tokens;
    const auto logits = oracle_edit(rows[spec.prompt.size() - 1 + k], spec.processing, spec.prompt, output, hold,
                                    spec.stop_tokens);
    EXPECT_EQ(got.tokens[k], sample_token(logits, spec.sampling, k)) << "token " << k;
  }
}

RequestSpec penalised(uint32_t seed, float temperature) {
  RequestSpec spec;
  spec.prompt = random_prompt(seed, 12);
  spec.max_tokens = 24;
  spec.sampling.temperature = temperature;
  spec.sampling.seed = seed;
  spec.processing.repetition_penalty = 1.5f;
  spec.processing.frequency_penalty = 0.7f;
  spec.processing.presence_penalty = 0.4f;
  spec.processing.logit_bias = {{spec.prompt[0], 2.0f}, {199999, -100.0f}};
  return spec;
}

TEST(EnginePenalties, GreedyAndSampledDrawsFollowTheOracleAloneAndInABatch) {
  const std::vector<RequestSpec> specs = {penalised(11, 0.0f), penalised(12, 1.0f), penalised(13, 0.7f)};
  const auto together = run_engine(specs);
  for (size_t i = 0; i < specs.size(); ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    ASSERT_EQ(together[i].tokens.size(), 24u);
    expect_draws_follow_the_oracle(specs[i], together[i]);
    EXPECT_EQ(run_engine({specs[i]}).at(0).tokens, together[i].tokens);  // batch-invariant, seeds reproduce
  }
  // The random tiny model rarely repeats a token, so positive penalties seldom change its greedy output; negative
  // ones (which reward repeats) must, and the draws still follow the oracle.
  RequestSpec repeating = specs[0];
  repeating.processing.frequency_penalty = -2.0f;
  repeating.processing.presence_penalty = -2.0f;
  repeating.processing.repetition_penalty = 1.0f;
  const Stream repeated = run_engine({repeating}).at(0);
  expect_draws_follow_the_oracle(repeating, repeated);
  RequestSpec plain = specs[0];
  plain.processing = {};
  EXPECT_NE(run_engine({plain}).at(0).tokens, repeated.tokens);
}

TEST(EnginePenalties, MinTokensHoldsStopTokensBackThenLetsThemEnd) {
  // The greedy output of the plain request, whose first token is made a stop token.
  RequestSpec spec;
  spec.prompt = random_prompt(21, 9);
  spec.max_tokens = 12;
  spec.sampling.temperature = 0.0f;
  const auto plain = run_engine({spec}).at(0).tokens;
  spec.stop_tokens = {plain[0]};
  EXPECT_EQ(run_engine({spec}).at(0).tokens, std::vector<int32_t>{plain[0]});  // stops at once
  spec.processing.min_tokens = 4;
  const Stream held = run_engine({spec}).at(0);
  ASSERT_GE(held.tokens.size(), 4u);
  for (size_t k = 0; k < 4; ++k) EXPECT_NE(held.tokens[k], plain[0]) << k;
  expect_draws_follow_the_oracle(spec, held);
  if (held.finish == FinishReason::stop) {
    EXPECT_EQ(held.tokens.back(), plain[0]);
  }
}

TEST(EnginePenalties, MinTokensAboveMaxTokensIsRefused) {
  CpuRunner runner(tiny_checkpoint(), 1);
  EngineConfig config;
  config.num_kv_blocks = 64;
  EngineCore core(runner, config);
  RequestSpec spec;
  spec.prompt = {1, 2, 3};
  spec.max_tokens = 3;
  spec.processing.min_tokens = 4;
  EXPECT_THROW(core.validate(spec), Error);
  spec.processing.min_tokens = 0;
  spec.top_logprobs = 21;
  EXPECT_THROW(core.validate(spec), Error);
}

}  // namespace
}  // namespace moeserve

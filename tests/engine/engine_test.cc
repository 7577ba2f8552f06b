// The engine on the tiny model: concurrent requests give the same tokens as each run alone, across random
// arrivals, chunked prefill, preemption and prefix-cache hits; no KV block leaks; cancellation; validation.
#include <gtest/gtest.h>

#include <random>

#include "engine/engine.h"
#include "engine/engine_harness.h"
#include "engine/generate.h"
#include "model/gpt_oss/checkpoint.h"
#include "runner/cpu/cpu_runner.h"
#include "test_util.h"
#include "util/error.h"

namespace moeserve {
namespace {

using testing::Arrival;

std::shared_ptr<CpuRunner> tiny_runner() {
  static auto checkpoint = std::shared_ptr<const Checkpoint>(Checkpoint::open(testing::tiny_model()));
  return std::make_shared<CpuRunner>(checkpoint, 2);
}

std::vector<int32_t> random_tokens(std::mt19937& rng, int n) {
  std::uniform_int_distribution<int32_t> id(0, 199997);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = id(rng);
  return t;
}

// Requests with random prompt lengths (some sharing a prefix), output lengths and arrival steps.
std::vector<Arrival> random_arrivals(uint32_t seed, int count, bool sampled) {
  std::mt19937 rng(seed);
  const auto shared_prefix = random_tokens(rng, 48);
  std::vector<Arrival> arrivals;
  for (int i = 0; i < count; ++i) {
    Arrival a;
    a.step = std::uniform_int_distribution<int>(0, 12)(rng);
    if (i % 3 == 0) a.spec.prompt = shared_prefix;
    auto tail = random_tokens(rng, std::uniform_int_distribution<int>(1, 70)(rng));
    a.spec.prompt.insert(a.spec.prompt.end(), tail.begin(), tail.end());
    a.spec.max_tokens = std::uniform_int_distribution<int>(1, 20)(rng);
    a.spec.sampling.temperature = sampled ? 1.0f : 0.0f;
    a.spec.sampling.seed = 1000 + i;
    arrivals.push_back(std::move(a));
  }
  return arrivals;
}

std::vector<int32_t> alone(CpuRunner& runner, const RequestSpec& spec) {
  GenerateOptions options;
  options.max_tokens = spec.max_tokens;
  options.sampling = spec.sampling;
  options.stop_tokens = spec.stop_tokens;
  return generate_sequence(runner, spec.prompt, options).tokens;
}

void expect_same_as_alone(const std::vector<Arrival>& arrivals, const std::map<uint64_t, testing::Collected>& got) {
  auto runner = tiny_runner();
  ASSERT_EQ(got.size(), arrivals.size());
  for (size_t i = 0; i < arrivals.size(); ++i) {
    EXPECT_EQ(got.at(i).tokens, alone(*runner, arrivals[i].spec)) << "request " << i;
    EXPECT_EQ(got.at(i).finish, FinishReason::length) << "request " << i;
  }
}

EngineConfig config_with_blocks(int64_t blocks, int max_batched_tokens) {
  EngineConfig config;
  config.block_size = 8;
  config.num_kv_blocks = blocks;
  config.scheduler.max_batched_tokens = max_batched_tokens;
  return config;
}

TEST(Engine, ConcurrentGreedyRequestsMatchEachRunAlone) {
  auto runner = tiny_runner();
  EngineCore core(*runner, config_with_blocks(1024, 96));
  auto arrivals = random_arrivals(1, 14, false);
  auto got = testing::run_requests(core, arrivals);
  expect_same_as_alone(arrivals, got);
  EXPECT_GT(core.metrics().prefix_hit_tokens, 0u);  // the shared 48-token prefix was reused
  EXPECT_EQ(core.metrics().preemptions, 0u);
  EXPECT_TRUE(core.kv().pool().all_released());
}

TEST(Engine, SampledRequestsMatchEachRunAloneWithTheirSeeds) {
  auto runner = tiny_runner();
  EngineCore core(*runner, config_with_blocks(1024, 64));
  auto arrivals = random_arrivals(2, 10, true);
  expect_same_as_alone(arrivals, testing::run_requests(core, arrivals));
}

TEST(Engine, PreemptionUnderATinyKvBudgetLosesAndDuplicatesNothing) {
  auto runner = tiny_runner();
  // 40 blocks of 8 tokens: enough for any single request, far too few for all of them at once. Small steps
  // admit many requests with their first chunk, so their later chunks and decodes run the pool dry.
  EngineCore core(*runner, config_with_blocks(40, 24));
  auto arrivals = random_arrivals(3, 16, false);
  for (auto& a : arrivals) a.step = 0;
  auto got = testing::run_requests(core, arrivals);
  expect_same_as_alone(arrivals, got);
  EXPECT_GT(core.metrics().preemptions, 0u);
  EXPECT_TRUE(core.kv().pool().all_released());
}

TEST(Engine, PrefixCacheHitsGiveTheSameTokensAsMisses) {
  auto runner = tiny_runner();
  std::mt19937 rng(4);
  const auto system_prompt = random_tokens(rng, 100);
  std::vector<Arrival> arrivals;
  for (int i = 0; i < 6; ++i) {
    Arrival a;
    a.step = i * 6;  // later requests find the earlier ones' blocks cached (running or idle)
    a.spec.prompt = system_prompt;
    auto question = random_tokens(rng, 5 + i);
    a.spec.prompt.insert(a.spec.prompt.end(), question.begin(), question.end());
    a.spec.max_tokens = 6;
    a.spec.sampling.temperature = 0;
    arrivals.push_back(a);
  }
  EngineCore core(*runner, config_with_blocks(512, 256));
  expect_same_as_alone(arrivals, testing::run_requests(core, arrivals));
  // Every request after the first hits the 96 tokens of complete 8-token blocks inside the shared prefix.
  EXPECT_EQ(core.metrics().prefix_hit_tokens, 5u * 96u);
  EngineConfig off = config_with_blocks(512, 256);
  off.prefix_caching = false;
  EngineCore uncached(*runner, off);
  expect_same_as_alone(arrivals, testing::run_requests(uncached, arrivals));
  EXPECT_EQ(uncached.metrics().prefix_hit_tokens, 0u);
}

TEST(Engine, ChunkedPrefillGivesTheSameLogitsAsOneShot) {
  auto runner = tiny_runner();
  std::mt19937 rng(5);
  const auto prompt = random_tokens(rng, 75);
  const int groups = kv_groups_of(runner->config()).num_groups();
  runner->allocate_kv_cache({8, 64});
  std::vector<std::vector<int32_t>> tables(groups);
  for (int g = 0; g < groups; ++g)
    for (int b = 0; b < 10; ++b) tables[g].push_back(g * 10 + b);
  auto run = [&](int chunk) {
    std::vector<float> logits;
    ForwardOutput out;
    for (int begin = 0; begin < static_cast<int>(prompt.size()); begin += chunk) {
      const int end = std::min<int>(prompt.size(), begin + chunk);
      ForwardBatch batch;
      SequenceStep step;
      step.tokens = std::span(prompt).subspan(begin, end - begin);
      step.start_position = begin;
      for (const auto& t : tables) step.block_tables.emplace_back(t);
      step.num_logits = end - begin;
      batch.sequences.push_back(step);
      runner->forward(batch, out);
      logits.insert(logits.end(), out.logits.begin(), out.logits.end());
    }
    return logits;
  };
  const auto one_shot = run(static_cast<int>(prompt.size()));
  for (int chunk : {1, 3, 8, 16, 31, 74}) EXPECT_EQ(run(chunk), one_shot) << "chunk " << chunk;
}

TEST(Engine, CancelledRequestsEndAndGiveBackTheirBlocks) {
  auto runner = tiny_runner();
  EngineCore core(*runner, config_with_blocks(256, 64));
  auto arrivals = random_arrivals(6, 10, false);
  for (auto& a : arrivals) a.spec.max_tokens = 30;
  // Cancelled: 0 right after it arrives, 5 mid-way, 7 after it has finished (no effect).
  auto got = testing::run_requests(core, arrivals, [&](int step) {
    if (step == arrivals[0].step) core.cancel(0);
    if (step == arrivals[5].step + 8) core.cancel(5);
    if (step == arrivals[7].step + 200) core.cancel(7);
  });
  EXPECT_EQ(got.at(0).finish, FinishReason::cancelled);
  EXPECT_EQ(got.at(5).finish, FinishReason::cancelled);
  EXPECT_LT(got.at(0).tokens.size(), 30u);
  EXPECT_LT(got.at(5).tokens.size(), 30u);
  for (size_t i = 0; i < arrivals.size(); ++i) {
    if (i == 0 || i == 5) continue;
    EXPECT_EQ(got.at(i).finish, FinishReason::length);
    EXPECT_EQ(got.at(i).tokens, alone(*runner, arrivals[i].spec));
  }
  EXPECT_TRUE(core.kv().pool().all_released());
}

TEST(Engine, StopTokensEndARequestWithReasonStop) {
  auto runner = tiny_runner();
  RequestSpec spec;
  spec.prompt = {1, 2, 3, 4, 5};
  spec.max_tokens = 10;
  spec.sampling.temperature = 0;
  auto free_run = alone(*runner, spec);
  spec.stop_tokens = {free_run[3]};
  EngineCore core(*runner, config_with_blocks(64, 64));
  auto got = testing::run_requests(core, {{0, spec}});
  const auto first_stop = std::find(free_run.begin(), free_run.end(), free_run[3]) - free_run.begin();
  EXPECT_EQ(got.at(0).tokens, std::vector<int32_t>(free_run.begin(), free_run.begin() + first_stop + 1));
  EXPECT_EQ(got.at(0).finish, FinishReason::stop);
}

TEST(Engine, RequestsThatCanNeverRunAreRejectedWithTheReason) {
  auto runner = tiny_runner();
  EngineCore core(*runner, config_with_blocks(16, 64));
  auto rejects = [&](RequestSpec spec, const std::string& part) {
    try {
      core.validate(spec);
      ADD_FAILURE() << "accepted: " << part;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  RequestSpec ok;
  ok.prompt = {1, 2, 3};
  ok.max_tokens = 4;
  EXPECT_NO_THROW(core.validate(ok));
  RequestSpec r = ok;
  r.prompt = {};
  rejects(r, "prompt is empty");
  r = ok;
  r.prompt = {1, 300000};
  rejects(r, "outside the vocabulary");
  r = ok;
  r.max_tokens = 0;
  rejects(r, "max_tokens");
  r = ok;
  r.max_tokens = 1000;
  rejects(r, "KV blocks");
  r = ok;
  r.max_tokens = 200000;
  rejects(r, "exceeds the context");
  r = ok;
  r.sampling.top_p = 2;
  rejects(r, "top_p");
  EXPECT_NE(core.capacity_summary().find("16 blocks of 8 tokens"), std::string::npos) << core.capacity_summary();
}

TEST(Engine, ThreadedEngineStreamsCancelsFromOtherThreadsAndDrains) {
  auto runner = tiny_runner();
  auto reference_runner = tiny_runner();  // the engine thread owns `runner`
  EngineConfig config = config_with_blocks(512, 128);
  Engine engine(runner, config);
  auto arrivals = random_arrivals(7, 16, false);
  std::vector<std::unique_ptr<RequestStream>> streams;
  std::vector<uint64_t> ids;
  for (const auto& a : arrivals) {
    streams.push_back(std::make_unique<RequestStream>());
    ids.push_back(engine.submit(a.spec, streams.back()->callback()));
  }
  std::thread canceller([&] {
    engine.cancel(ids[2]);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    engine.cancel(ids[9]);
  });
  canceller.join();
  for (size_t i = 0; i < arrivals.size(); ++i) {
    std::vector<int32_t> tokens;
    FinishReason finish = FinishReason::none;
    TimePoint last{};
    while (finish == FinishReason::none) {
      RequestEvent e = streams[i]->next();
      EXPECT_GE(e.time, last);  // timestamps never go backwards
      last = e.time;
      tokens.insert(tokens.end(), e.tokens.begin(), e.tokens.end());
      finish = e.finish;
    }
    if (i == 2 || i == 9) {
      EXPECT_TRUE(finish == FinishReason::cancelled || finish == FinishReason::length);
      continue;
    }
    EXPECT_EQ(finish, FinishReason::length);
    EXPECT_EQ(tokens, alone(*reference_runner, arrivals[i].spec));
  }
  engine.drain(std::chrono::milliseconds(1000));
  EXPECT_EQ(engine.in_flight(), 0);
  EXPECT_THROW(engine.submit(arrivals[0].spec, {}), Error);
  auto m = engine.metrics();
  EXPECT_EQ(m.kv_blocks_in_use, 0);
  EXPECT_EQ(m.running + m.waiting, 0u);
  EXPECT_GE(m.ttft.count(), 14u);
}

}  // namespace
}  // namespace moeserve

namespace moeserve {
namespace {

TEST(Engine, KvPoolIsSizedFromAByteBudget) {
  auto runner = tiny_runner();
  EngineConfig config;
  config.block_size = 16;
  config.kv_cache_bytes = 1 << 20;
  EngineCore core(*runner, config);
  // Tiny model: 2 layers per KV group x (K, V) x 16 tokens x 2 KV heads x 64 dims x 4 bytes = 32 KiB a block.
  EXPECT_EQ(runner->kv_block_bytes(16), 32768u);
  EXPECT_EQ(core.kv().pool().num_blocks(), 32);
  EXPECT_NE(core.capacity_summary().find("holds at least 256 tokens"), std::string::npos) << core.capacity_summary();
  EngineConfig fraction;
  fraction.kv_cache_fraction = 0.5;
  EXPECT_THROW(EngineCore(*runner, fraction), Error);  // the CPU runner has no device memory
}

}  // namespace
}  // namespace moeserve

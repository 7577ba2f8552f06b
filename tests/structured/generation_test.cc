// Constrained decoding end to end on the tiny model, whose random weights never write JSON by themselves: 1,000
// generations (20 random schemas x 50 seeds, sampled at temperature 1, all of a schema's requests in one engine
// batch on the CPU runner) must each end on the stop token with a document that parses and validates against
// its schema (the independent validator of schema_testing.h). json_object outputs that end parse as objects;
// those max_tokens cuts short are prefixes of one.
#include <gtest/gtest.h>

#include "engine/engine_core.h"
#include "model/checkpoint.h"
#include "runner/cpu/cpu_runner.h"
#include "structured/schema_testing.h"
#include "structured/token_mask.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace moeserve {
namespace {

using nlohmann::json;

constexpr int32_t kEnd = 200002;  // <|return|>, the requests' stop token

const Tokenizer& tokenizer() {
  static const auto t = Tokenizer::o200k_harmony();
  return *t;
}

std::shared_ptr<const structured::TokenVocabulary> vocabulary() {
  static const auto vocab = [] {
    std::vector<std::string> bytes(201088);
    std::vector<bool> special(201088);
    for (int32_t id = 0; id < 201088; ++id) {
      special[id] = tokenizer().is_special(id);
      if (!special[id]) bytes[id] = std::string(tokenizer().token_bytes(id));
    }
    return std::make_shared<const structured::TokenVocabulary>(std::move(bytes), std::move(special));
  }();
  return vocab;
}

struct Output {
  std::vector<int32_t> tokens;
  FinishReason finish = FinishReason::none;
};

// n sampled generations of one grammar, together in one engine.
std::vector<Output> generate(const std::shared_ptr<const structured::TokenGrammar>& grammar, int n, uint64_t seed,
                             int max_tokens = 1500) {
  static auto checkpoint = std::shared_ptr<const Checkpoint>(Checkpoint::open(testing::tiny_model()));
  CpuRunner runner(checkpoint, 2);
  EngineConfig config;
  config.block_size = 16;
  config.num_kv_blocks = 4096;
  config.scheduler.max_batched_tokens = 512;
  EngineCore core(runner, config);
  std::vector<Output> out(n);
  for (int i = 0; i < n; ++i) {
    RequestSpec spec;
    spec.prompt = {200006, 17360, 200008, static_cast<int32_t>(1000 + i)};
    spec.max_tokens = max_tokens;
    spec.sampling.seed = seed * 1000 + i;
    spec.stop_tokens = {kEnd};
    spec.grammar = grammar;
    core.add_request(i, spec, [&out](const RequestEvent& e) {
      Output& o = out[e.request_id];
      o.tokens.insert(o.tokens.end(), e.tokens.begin(), e.tokens.end());
      if (e.finish != FinishReason::none) o.finish = e.finish;
    });
  }
  for (int step = 0; core.has_work(); ++step) {
    if (step > 5000) throw std::runtime_error("no progress");
    core.step();
  }
  return out;
}

std::string text_of(const Output& o) {
  std::vector<int32_t> body = o.tokens;
  if (!body.empty() && body.back() == kEnd) body.pop_back();
  return tokenizer().decode_bytes(body);
}

TEST(ConstrainedGeneration, AThousandRandomSchemaGenerationsAllParseAndValidate) {
  structured::GrammarCache grammars(vocabulary());
  std::mt19937 rng(2024);
  int valid = 0;
  for (int s = 0; s < 20; ++s) {
    const json schema = testing::random_schema(rng);
    SCOPED_TRACE(schema.dump());
    const auto outputs = generate(grammars.json_schema(schema), 50, s);
    for (const Output& o : outputs) {
      ASSERT_EQ(o.finish, FinishReason::stop) << text_of(o);
      ASSERT_EQ(o.tokens.back(), kEnd);
      const json parsed = json::parse(text_of(o), nullptr, false);
      ASSERT_FALSE(parsed.is_discarded()) << text_of(o);
      EXPECT_TRUE(testing::validates(parsed, schema)) << text_of(o);
      ++valid;
    }
    EXPECT_EQ(grammars.json_schema(schema), grammars.json_schema(schema));  // compiled once, then cached
  }
  EXPECT_EQ(valid, 1000);
}

TEST(ConstrainedGeneration, TheGrammarStartsAfterItsTrigger) {
  // <|channel|> (a special token, never part of a document) forced first by logit_bias, as a one-token trigger;
  // what follows it is the document.
  structured::GrammarCache grammars(vocabulary());
  static auto checkpoint = std::shared_ptr<const Checkpoint>(Checkpoint::open(testing::tiny_model()));
  CpuRunner runner(checkpoint, 1);
  EngineConfig config;
  config.num_kv_blocks = 512;
  EngineCore core(runner, config);
  RequestSpec spec;
  spec.prompt = {200006, 17360, 200008};
  spec.max_tokens = 300;
  spec.stop_tokens = {kEnd};
  spec.grammar = grammars.json_schema(json{{"type", "array"}, {"items", {{"type", "boolean"}}}, {"maxItems", 3}});
  spec.grammar_trigger = {200005};
  spec.processing.logit_bias = {{200005, 100.0f}};
  Output out;
  core.add_request(0, spec, [&out](const RequestEvent& e) {
    out.tokens.insert(out.tokens.end(), e.tokens.begin(), e.tokens.end());
    if (e.finish != FinishReason::none) out.finish = e.finish;
  });
  while (core.has_work()) core.step();
  ASSERT_EQ(out.finish, FinishReason::stop);
  ASSERT_EQ(out.tokens.front(), 200005);
  const std::vector<int32_t> document(out.tokens.begin() + 1, out.tokens.end() - 1);
  const json parsed = json::parse(tokenizer().decode_bytes(document), nullptr, false);
  ASSERT_FALSE(parsed.is_discarded()) << tokenizer().decode_bytes(document);
  EXPECT_TRUE(parsed.is_array());
}

TEST(ConstrainedGeneration, JsonObjectOutputsAreObjectsOrCutOffPrefixesOfOne) {
  structured::GrammarCache grammars(vocabulary());
  const auto grammar = grammars.json_object();
  for (const Output& o : generate(grammar, 8, 99, 300)) {
    if (o.finish == FinishReason::stop) {
      const json parsed = json::parse(text_of(o), nullptr, false);
      ASSERT_FALSE(parsed.is_discarded()) << text_of(o);
      EXPECT_TRUE(parsed.is_object());
    } else {
      // An open-ended object may run past max_tokens: what it wrote is still a prefix of a document.
      EXPECT_EQ(o.finish, FinishReason::length);
      structured::MatcherState state = grammar->start();
      EXPECT_TRUE(grammar->matcher().feed(state, text_of(o))) << text_of(o);
    }
  }
}

}  // namespace
}  // namespace moeserve

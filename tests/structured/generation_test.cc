// Constrained decoding end to end on the tiny model, whose random weights never write JSON by themselves: 1,000
// generations (20 random schemas x 50 seeds, sampled at temperature 1, all of a schema's requests in one engine
// batch on the CPU runner) must each end on the stop token with a document that parses and validates against
// its schema (the independent validator of schema_testing.h). json_object outputs that end parse as objects;
// those max_tokens cuts short are prefixes of one. Speculating constrained requests keep the non-speculative
// greedy tokens while drafts (valid, invalid under the grammar, or wrong) are checked against the mask.
#include <gtest/gtest.h>

#include "engine/engine_core.h"
#include "engine/speculative/verifier.h"
#include "model/gpt_oss/checkpoint.h"
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

// Drafts the reference output of each sequence (its tokens after the root), with about 30% of them replaced by
// a token the grammar refuses or by another one, so that verification must accept, reject and resample.
class ReplayDrafter : public speculative::Drafter {
 public:
  ReplayDrafter(std::vector<std::vector<int32_t>> outputs, int prompt_length)
      : outputs_(std::move(outputs)), prompt_length_(prompt_length) {}
  std::vector<int> aux_layers() const override { return {}; }
  void release(uint64_t) override {}
  void propose(std::span<const speculative::DraftInput> inputs, std::vector<speculative::DraftTree>& out) override {
    out.assign(inputs.size(), {});
    for (size_t i = 0; i < inputs.size(); ++i) {
      const auto& in = inputs[i];
      const auto& reference = outputs_.at(in.sequence_id);
      const int64_t root = in.start_position + static_cast<int64_t>(in.next_tokens.size()) - prompt_length_;
      for (int d = 1; d <= in.shape.num_draft_tokens && root + d < static_cast<int64_t>(reference.size()); ++d) {
        const uint64_t h = speculative::acceptance_uniform(in.sequence_id, root + d, 0) * 10;
        const int32_t token = h < 2 ? 200005 : h < 3 ? 12345 : reference[root + d];
        out[i].tokens.push_back(token);
        out[i].parent.push_back(d - 2);
      }
    }
  }

 private:
  std::vector<std::vector<int32_t>> outputs_;
  int prompt_length_;
};

TEST(ConstrainedGeneration, SpeculationChecksDraftsAgainstTheMaskAndChangesNoToken) {
  structured::GrammarCache grammars(vocabulary());
  const json schema = {{"type", "object"},
                       {"properties", {{"a", {{"type", "string"}, {"maxLength", 6}}}, {"b", {{"type", "array"},
                                       {"items", {{"type", "integer"}}}, {"maxItems", 3}}}}},
                       {"required", {"a", "b"}}, {"additionalProperties", false}};
  const auto grammar = grammars.json_schema(schema);
  static auto checkpoint = std::shared_ptr<const Checkpoint>(Checkpoint::open(testing::tiny_model()));
  auto run = [&](std::shared_ptr<speculative::Drafter> drafter, EngineMetrics* metrics) {
    CpuRunner runner(checkpoint, 2);
    EngineConfig config;
    config.num_kv_blocks = 1024;
    config.drafter = std::move(drafter);
    EngineCore core(runner, config);
    std::vector<Output> out(6);
    for (int i = 0; i < 6; ++i) {
      RequestSpec spec;
      spec.prompt = {200006, 17360, 200008, static_cast<int32_t>(2000 + i)};
      spec.max_tokens = 200;
      spec.sampling.temperature = 0.0f;
      spec.stop_tokens = {kEnd};
      spec.grammar = grammar;
      if (config.drafter) spec.speculation = speculative::DraftShape{4, 1, 0};
      core.add_request(i, spec, [&out](const RequestEvent& e) {
        out[e.request_id].tokens.insert(out[e.request_id].tokens.end(), e.tokens.begin(), e.tokens.end());
        if (e.finish != FinishReason::none) out[e.request_id].finish = e.finish;
      });
    }
    while (core.has_work()) core.step();
    if (metrics) *metrics = core.metrics();
    return out;
  };
  const auto plain = run(nullptr, nullptr);
  std::vector<std::vector<int32_t>> reference;
  for (const Output& o : plain) {
    ASSERT_EQ(o.finish, FinishReason::stop);
    reference.push_back(o.tokens);
  }
  EngineMetrics metrics;
  const auto speculated = run(std::make_shared<ReplayDrafter>(reference, 4), &metrics);
  for (size_t i = 0; i < plain.size(); ++i) EXPECT_EQ(speculated[i].tokens, plain[i].tokens) << "request " << i;
  EXPECT_GT(metrics.spec_accepted_tokens, 0u);                         // drafts were taken
  EXPECT_LT(metrics.spec_accepted_tokens, metrics.spec_draft_tokens);  // and refused ones were refused
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

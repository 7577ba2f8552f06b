// The token mask over the real 201,088-token vocabulary against a reference: at every state of random walks
// through random schemas (each step a random allowed token), token t is in the mask exactly when a fresh
// matcher, fed the walk's whole text from the start and then t's bytes, accepts them. The reference shares no
// path with the mask's incremental state, first-byte buckets, plain-string fast path or cache. Walks that end
// whole must parse and validate.
#include <gtest/gtest.h>

#include "structured/schema_testing.h"
#include "structured/token_mask.h"
#include "tokenizer/tokenizer.h"

namespace moeserve::structured {
namespace {

using nlohmann::json;

std::shared_ptr<const TokenVocabulary> vocabulary() {
  static const auto vocab = [] {
    const auto tokenizer = Tokenizer::o200k_harmony();
    constexpr int32_t kVocab = 201088;
    std::vector<std::string> bytes(kVocab);
    std::vector<bool> special(kVocab);
    for (int32_t id = 0; id < kVocab; ++id) {
      special[id] = tokenizer->is_special(id);
      if (!special[id]) bytes[id] = std::string(tokenizer->token_bytes(id));
    }
    return std::make_shared<const TokenVocabulary>(std::move(bytes), std::move(special));
  }();
  return vocab;
}

bool allowed(const TokenMask& mask, int32_t t) { return (mask[t >> 5] >> (t & 31)) & 1u; }

TEST(TokenMask, EqualsTheReferenceMatcherAtEveryStateOfRandomWalks) {
  std::mt19937 rng(5);
  const auto vocab = vocabulary();
  int states = 0, whole = 0;
  std::vector<json> schemas = {json{{"type", "object"}}};
  for (int i = 0; i < 30; ++i) schemas.push_back(testing::random_schema(rng));
  for (const json& schema : schemas) {
    SCOPED_TRACE(schema.dump());
    const TokenGrammar grammar(schema == json{{"type", "object"}} ? any_json_object() : compile_json_schema(schema),
                               vocab);
    MatcherState state = grammar.start();
    std::string text;
    for (int step = 0; step < 24 && !grammar.complete(state); ++step) {
      const TokenMask mask = *grammar.mask(state);
      MatcherState replayed = grammar.matcher().start();
      ASSERT_TRUE(grammar.matcher().feed(replayed, text));
      std::vector<int32_t> allowed_tokens;
      for (int32_t t = 0; t < static_cast<int32_t>(vocab->size()); ++t) {
        bool want = false;
        if (!vocab->special(t)) {
          MatcherState s = replayed;
          want = grammar.matcher().feed(s, vocab->bytes(t));
        }
        ASSERT_EQ(allowed(mask, t), want) << "token " << t << " '" << vocab->bytes(t) << "' after '" << text << "'";
        if (want) allowed_tokens.push_back(t);
      }
      ++states;
      ASSERT_FALSE(allowed_tokens.empty()) << "a dead end after '" << text << "'";
      // Prefer short tokens now and then, so that walks also reach the end of documents.
      int32_t next = allowed_tokens[std::uniform_int_distribution<size_t>(0, allowed_tokens.size() - 1)(rng)];
      if (step % 2 == 1)
        for (int32_t t : allowed_tokens)
          if (vocab->bytes(t).size() == 1 && vocab->bytes(t)[0] != ' ') next = t;
      ASSERT_TRUE(grammar.advance(state, next));
      text += vocab->bytes(next);
      EXPECT_EQ(*grammar.mask(state), grammar.compute_mask(state));  // the cached mask is the computed one
    }
    if (grammar.complete(state)) {
      ++whole;
      EXPECT_TRUE(testing::validates(json::parse(text), schema)) << text;
    }
  }
  EXPECT_GT(states, 150);
  EXPECT_GT(whole, 5);
}

TEST(TokenMask, SpecialTokensAreNeverAllowedAndAFinishedDocumentAllowsNoText) {
  const TokenGrammar grammar(compile_json_schema(json{{"type", "boolean"}}), vocabulary());
  MatcherState state = grammar.start();
  const TokenMask first = *grammar.mask(state);
  for (int32_t t = 199998; t < 201088; ++t)
    if (vocabulary()->special(t)) {
      EXPECT_FALSE(allowed(first, t)) << t;
    }
  ASSERT_TRUE(grammar.matcher().feed(state, "true"));
  EXPECT_TRUE(grammar.complete(state));
  const TokenMask after = *grammar.mask(state);
  EXPECT_TRUE(std::all_of(after.begin(), after.end(), [](uint32_t w) { return w == 0; }));
}

}  // namespace
}  // namespace moeserve::structured

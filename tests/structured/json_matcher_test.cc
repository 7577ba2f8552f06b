// The character-level matcher (structured/json_matcher.h): hand-picked documents it must take or refuse; every
// random document of a random schema, and each of its prefixes, is taken (it never forbids what the schema
// allows); and whatever it takes whole from random edits of those documents parses and validates against the
// schema under the independent validator (it never allows what the schema forbids).
#include <gtest/gtest.h>

#include "structured/json_matcher.h"
#include "structured/schema_testing.h"
#include "util/error.h"

namespace moeserve::structured {
namespace {

using nlohmann::json;

struct Checker {
  JsonSchema schema;
  JsonMatcher matcher{schema};
  explicit Checker(const json& s) : schema(compile_json_schema(s)) {}
  // 1: a whole document; 0: a prefix of one; -1: neither.
  int verdict(const std::string& text) const {
    MatcherState state = matcher.start();
    if (!matcher.feed(state, text)) return -1;
    return matcher.complete(state) ? 1 : 0;
  }
};

TEST(JsonMatcher, HandPickedDocuments) {
  const json person = json::parse(R"({"type": "object", "additionalProperties": false, "required": ["age", "name"],
      "properties": {"age": {"type": "integer"}, "name": {"type": "string", "maxLength": 3},
                     "tags": {"type": "array", "items": {"enum": [1, 12, "x"]}, "maxItems": 2}}})");
  const Checker c(person);
  EXPECT_EQ(c.verdict(R"({"age":30,"name":"Bob"})"), 1);
  EXPECT_EQ(c.verdict(R"({"age":-0,"name":"","tags":[12,1]})"), 1);
  EXPECT_EQ(c.verdict(R"({"age":30,"name":"Bob","tags":["x"]})"), 1);
  EXPECT_EQ(c.verdict(R"({"age":30,"na)"), 0);
  EXPECT_EQ(c.verdict(R"({"age":30,"name":"Bobby"})"), -1);   // maxLength
  EXPECT_EQ(c.verdict(R"({"name":"Bob","age":30})"), -1);     // properties in the schema's order
  EXPECT_EQ(c.verdict(R"({"age":30})"), -1);                  // name is required
  EXPECT_EQ(c.verdict(R"({"age":030,"name":"B"})"), -1);      // leading zero
  EXPECT_EQ(c.verdict(R"({"age":3.5,"name":"B"})"), -1);      // not an integer
  EXPECT_EQ(c.verdict(R"({"age":1,"name":"B","tags":[1,1,1]})"), -1);  // maxItems
  EXPECT_EQ(c.verdict(R"({"age":1,"name":"B","x":1})"), -1);  // additional property
  EXPECT_EQ(c.verdict(R"({ "age":1,"name":"B"})"), -1);       // no whitespace outside strings
  EXPECT_EQ(c.verdict(R"({"age":1,"name":"B"} )"), -1);       // nor after the document
  EXPECT_EQ(c.verdict("{\"age\":1,\"name\":\"\xc3\xa9\xe2\x82\xac\"}"), 1);
  EXPECT_EQ(c.verdict("{\"age\":1,\"name\":\"\xc0\xaf\"}"), -1);      // overlong UTF-8
  EXPECT_EQ(c.verdict("{\"age\":1,\"name\":\"\xed\xa0\x80\"}"), -1);  // a surrogate
  EXPECT_EQ(c.verdict("{\"age\":1,\"name\":\"a\nb\"}"), -1);          // control characters are escaped
  EXPECT_EQ(c.verdict(R"({"age":1,"name":"a\nb"})"), 1);
  EXPECT_EQ(c.verdict(R"({"age":1,"name":"\u0041"})"), -1);          // no \u escapes
  // Top-level numbers end with the document; enum values that are prefixes of others.
  const Checker number(json{{"type", "number"}});
  EXPECT_EQ(number.verdict("12"), 1);
  EXPECT_EQ(number.verdict("-1.5e+10"), 1);
  EXPECT_EQ(number.verdict("1."), 0);
  EXPECT_EQ(number.verdict("1e123"), -1);  // at most two exponent digits
  const Checker prefixes(json{{"enum", {1, 12, "a"}}});
  EXPECT_EQ(prefixes.verdict("1"), 1);
  EXPECT_EQ(prefixes.verdict("12"), 1);
  EXPECT_EQ(prefixes.verdict("123"), -1);
  const Checker object(json{{"type", "object"}});
  EXPECT_EQ(object.verdict(R"({"a":[1,{"b":null}],"c":"d"})"), 1);
  EXPECT_EQ(object.verdict(R"([1])"), -1);
}

TEST(JsonMatcher, UnsupportedSchemaKeywordsAreRefusedByName) {
  for (const char* schema : {R"({"type": "string", "pattern": "a+"})", R"({"anyOf": [{"type": "string"}]})",
                             R"({"type": "object", "properties": {}, "additionalProperties": true})",
                             R"({"type": ["number", "integer"]})", R"({"$ref": "#/x"})"}) {
    try {
      compile_json_schema(json::parse(schema));
      ADD_FAILURE() << "accepted " << schema;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).size(), 0u);
    }
  }
}

TEST(JsonMatcher, TakesEveryRandomDocumentAndEachOfItsPrefixes) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 300; ++trial) {
    const json schema = testing::random_schema(rng);
    const Checker c(schema);
    for (int d = 0; d < 5; ++d) {
      const std::string doc = testing::random_document(rng, schema);
      ASSERT_TRUE(testing::validates(json::parse(doc), schema)) << doc << " for " << schema.dump();
      EXPECT_EQ(c.verdict(doc), 1) << doc << " for " << schema.dump();
      for (size_t n = 0; n < doc.size(); ++n) ASSERT_GE(c.verdict(doc.substr(0, n)), 0) << doc.substr(0, n);
    }
  }
}

TEST(JsonMatcher, WhatItTakesWholeFromRandomEditsValidates) {
  std::mt19937 rng(12);
  const std::string alphabet = "{}[]\":,-.0123456789eEtrufalsn \\xk_ab\xc3\xa9";
  int taken = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const json schema = testing::random_schema(rng);
    const Checker c(schema);
    for (int d = 0; d < 20; ++d) {
      std::string doc = testing::random_document(rng, schema);
      const int edits = std::uniform_int_distribution<int>(1, 3)(rng);
      for (int e = 0; e < edits && !doc.empty(); ++e) {
        const size_t at = std::uniform_int_distribution<size_t>(0, doc.size() - 1)(rng);
        const char c2 = alphabet[std::uniform_int_distribution<size_t>(0, alphabet.size() - 1)(rng)];
        switch (std::uniform_int_distribution<int>(0, 2)(rng)) {
          case 0: doc[at] = c2; break;
          case 1: doc.insert(doc.begin() + static_cast<std::ptrdiff_t>(at), c2); break;
          default: doc.erase(at, 1); break;
        }
      }
      if (c.verdict(doc) != 1) continue;
      ++taken;
      const json parsed = json::parse(doc, nullptr, false);
      ASSERT_FALSE(parsed.is_discarded()) << doc << " for " << schema.dump();
      EXPECT_TRUE(testing::validates(parsed, schema)) << doc << " for " << schema.dump();
    }
  }
  EXPECT_GT(taken, 100);  // the edits kept enough documents whole to mean something
}

}  // namespace
}  // namespace moeserve::structured

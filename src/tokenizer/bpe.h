// Byte-pair encoding of one pre-tokenised piece, as tiktoken defines it: start from single bytes and repeatedly
// merge the adjacent pair whose concatenation has the lowest rank (the leftmost such pair on ties) until no
// adjacent concatenation is a token. Short pieces use tiktoken's own quadratic scan. Long ones (runs of spaces,
// of a letter, of newlines: adversarial input) take time linear in the piece instead, from two properties of that
// merge order (github/rust-gems, crates/bpe/README.md, "Properties of BPE" and "Novel Algorithm"): the tokens
// before any boundary of a text's encoding are the encoding of that prefix, and a tokenisation is the encoding
// exactly when its first token encodes to itself and every two neighbours encode to themselves when their bytes
// are encoded alone. So each prefix's encoding is known by its last token: the one token ending there that is
// valid after the last token of the prefix before it. Left to right, each prefix's last token is found among the
// tokens ending there (at most the longest token's length of them), and the encoding is read back from the end.
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

#include "tokenizer/rank_table.h"

namespace moeserve {

// Pieces up to this many bytes use the scan: above it, its n^2 rank look-ups cost more than the others' bookkeeping.
inline constexpr size_t kScanLimit = 128;

// Appends the tokens of piece (non-empty) to out. Every single byte must have a rank.
void byte_pair_encode(const RankTable& ranks, std::string_view piece, std::vector<TokenId>& out);

// The strategies, exposed so that a test can check that they agree on any input: the scan and the heap run the
// merge loop itself (the heap in O(n log n)); "merging" is the scan up to kScanLimit bytes, else the heap (the
// linear encoder's check of a pair); the linear encoder is the one above.
void byte_pair_encode_scan(const RankTable& ranks, std::string_view piece, std::vector<TokenId>& out);
void byte_pair_encode_heap(const RankTable& ranks, std::string_view piece, std::vector<TokenId>& out);
void byte_pair_encode_merging(const RankTable& ranks, std::string_view piece, std::vector<TokenId>& out);
void byte_pair_encode_linear(const RankTable& ranks, std::string_view piece, std::vector<TokenId>& out);

}  // namespace moeserve

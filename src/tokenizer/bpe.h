// Byte-pair encoding of one pre-tokenised piece, as tiktoken defines it: start from single bytes and repeatedly
// merge the adjacent pair whose concatenation has the lowest rank (the leftmost such pair on ties) until no
// adjacent concatenation is a token. Short pieces use tiktoken's own quadratic scan; long ones (runs of spaces,
// long words) a heap over the same (rank, position) order, which makes the same merges in O(n log n).
#pragma once

#include <string_view>
#include <vector>

#include "tokenizer/rank_table.h"

namespace moeserve {

// Appends the tokens of piece (non-empty) to out. Every single byte must have a rank.
void byte_pair_encode(const RankTable& ranks, std::string_view piece, std::vector<TokenId>& out);

// The two merge strategies, exposed so that a test can check that they agree on any input.
void byte_pair_encode_scan(const RankTable& ranks, std::string_view piece, std::vector<TokenId>& out);
void byte_pair_encode_heap(const RankTable& ranks, std::string_view piece, std::vector<TokenId>& out);

}  // namespace moeserve

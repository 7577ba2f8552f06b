// The exactness tests' comparison with a reference tokenizer's ids: read from a file of little-endian uint32, and
// the first difference shown with its context, decoded.
#pragma once

#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace moeserve::testing {

std::vector<TokenId> read_id_file(const std::string& path);

// "" when the two are equal; else where they first differ, with five ids either side of it in both.
std::string first_difference(const std::vector<TokenId>& expected, const std::vector<TokenId>& actual,
                             const Tokenizer& tokenizer);

}  // namespace moeserve::testing

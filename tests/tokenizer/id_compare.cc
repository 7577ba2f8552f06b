#include "tokenizer/id_compare.h"

#include <algorithm>
#include <cstring>

#include "util/files.h"

namespace moeserve::testing {

std::vector<TokenId> read_id_file(const std::string& path) {
  const std::string bytes = read_text_file(path);
  std::vector<TokenId> ids(bytes.size() / 4);
  std::memcpy(ids.data(), bytes.data(), ids.size() * 4);
  return ids;
}

std::string first_difference(const std::vector<TokenId>& expected, const std::vector<TokenId>& actual,
                             const Tokenizer& tokenizer) {
  size_t first = 0;
  while (first < std::min(expected.size(), actual.size()) && expected[first] == actual[first]) ++first;
  if (first == std::max(expected.size(), actual.size())) return "";
  const size_t from = first >= 5 ? first - 5 : 0;
  auto context = [&](const std::vector<TokenId>& ids) {
    const size_t to = std::min(ids.size(), first + 5);
    std::string text;
    for (size_t i = from; i < to; ++i) text += std::to_string(ids[i]) + " ";
    return text + "= \"" + tokenizer.decode(std::span(ids).subspan(from, to - from)) + "\"";
  };
  return "first difference at token " + std::to_string(first) + " of " + std::to_string(expected.size()) +
         " (ours " + std::to_string(actual.size()) + ")\n reference: " + context(expected) +
         "\n ours:      " + context(actual);
}

}  // namespace moeserve::testing

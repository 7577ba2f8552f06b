// Shared by the Harmony tests: the tokenizer and the vectors in tests/fixtures/harmony.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"
#include "util/files.h"

namespace moeserve::harmony::testing {

inline const Tokenizer& tokenizer() {
  static const std::unique_ptr<Tokenizer> t = Tokenizer::o200k_harmony();
  return *t;
}

// A vector's text with trailing whitespace trimmed, as harmony's tests read them.
inline std::string vector_text(const std::string& name) {
  std::string text = read_text_file(std::string(MOESERVE_SOURCE_DIR) + "/tests/fixtures/harmony/" + name);
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ' || text.back() == '\r' || text.back() == '\t')) {
    text.pop_back();
  }
  return text;
}

inline std::vector<TokenId> vector_ids(const std::string& name) {
  std::vector<TokenId> ids;
  const std::string text = vector_text(name);
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
    size_t end = i;
    while (end < text.size() && std::isdigit(static_cast<unsigned char>(text[end]))) ++end;
    if (end > i) ids.push_back(std::stoi(text.substr(i, end - i)));
    i = end + (end == i);
  }
  return ids;
}

}  // namespace moeserve::harmony::testing

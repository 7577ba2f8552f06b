// tiktoken's rank file: see tokenizer_files.h.
#include <array>
#include <charconv>

#include "tokenizer/tokenizer_files.h"
#include "util/error.h"
#include "util/bounded_read.h"
#include "util/files.h"

namespace moeserve {
namespace {

constexpr std::string_view kBase64Alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

// Standard base64 with padding; false for anything else.
bool base64_decode(std::string_view text, std::string& out) {
  static const std::array<int8_t, 256> value = [] {
    std::array<int8_t, 256> v{};
    v.fill(-1);
    for (size_t i = 0; i < kBase64Alphabet.size(); ++i) v[static_cast<uint8_t>(kBase64Alphabet[i])] = int8_t(i);
    return v;
  }();
  out.clear();
  if (text.empty() || text.size() % 4 != 0) return false;
  for (size_t i = 0; i < text.size(); i += 4) {
    const bool last = i + 4 == text.size();
    const size_t padding = last ? (text[i + 3] == '=') + (text[i + 2] == '=') : 0;
    if (padding == 1 && text[i + 2] == '=') return false;
    uint32_t group = 0;
    for (size_t j = 0; j < 4; ++j) {
      const int8_t v = j >= 4 - padding ? 0 : value[static_cast<uint8_t>(text[i + j])];
      if (v < 0) return false;
      group = group << 6 | static_cast<uint32_t>(v);
    }
    out += static_cast<char>(group >> 16);
    if (padding < 2) out += static_cast<char>(group >> 8 & 0xFF);
    if (padding < 1) out += static_cast<char>(group & 0xFF);
  }
  return true;
}

std::string base64_encode(std::string_view bytes) {
  std::string out;
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const size_t n = std::min<size_t>(3, bytes.size() - i);
    uint32_t group = 0;
    for (size_t j = 0; j < 3; ++j) group = group << 8 | (j < n ? static_cast<uint8_t>(bytes[i + j]) : 0u);
    for (size_t j = 0; j < 4; ++j) out += j <= n ? kBase64Alphabet[group >> (18 - 6 * j) & 63] : '=';
  }
  return out;
}

}  // namespace

std::vector<std::string> read_tiktoken_ranks(const std::string& path) {
  const std::string text = read_text_file(path, 64 * kMiB);  // o200k_base.tiktoken is 3.6 MiB
  MOESERVE_CHECK(!text.empty(), "{}: empty rank file", path);
  MOESERVE_CHECK(text.back() == '\n', "{}: truncated rank file (the last line has no newline)", path);
  std::vector<std::string> tokens;
  std::vector<bool> seen;
  std::string bytes;
  size_t line_number = 0;
  for (size_t start = 0; start < text.size();) {
    const size_t end = text.find('\n', start);
    const std::string_view line(text.data() + start, end - start);
    start = end + 1;
    ++line_number;
    const size_t space = line.find(' ');
    MOESERVE_CHECK(space != std::string_view::npos, "{}:{}: expected \"<base64 token> <rank>\"", path, line_number);
    MOESERVE_CHECK(base64_decode(line.substr(0, space), bytes), "{}:{}: \"{}\" is not base64", path, line_number,
                   line.substr(0, space));
    const std::string_view rank_text = line.substr(space + 1);
    size_t rank = 0;
    const auto [ptr, ec] = std::from_chars(rank_text.data(), rank_text.data() + rank_text.size(), rank);
    MOESERVE_CHECK(ec == std::errc() && ptr == rank_text.data() + rank_text.size() && !rank_text.empty(),
                   "{}:{}: rank \"{}\" is not a number", path, line_number, rank_text);
    MOESERVE_CHECK(rank < static_cast<size_t>(o200k::kMergeableTokens),
                   "{}:{}: rank {} is beyond o200k's {} mergeable tokens", path, line_number, rank,
                   o200k::kMergeableTokens);
    if (rank >= tokens.size()) {
      tokens.resize(rank + 1);
      seen.resize(rank + 1);
    }
    MOESERVE_CHECK(!seen[rank], "{}:{}: rank {} appears twice", path, line_number, rank);
    seen[rank] = true;
    tokens[rank] = bytes;
  }
  for (size_t r = 0; r < tokens.size(); ++r) MOESERVE_CHECK(seen[r], "{}: rank {} is missing", path, r);
  MOESERVE_CHECK(tokens.size() == static_cast<size_t>(o200k::kMergeableTokens),
                 "{}: truncated rank file: {} ranks, o200k_base has {}", path, tokens.size(), o200k::kMergeableTokens);
  return tokens;
}

void write_tiktoken_ranks(const RankTable& ranks, const std::string& path) {
  std::string text;
  for (size_t r = 0; r < ranks.size(); ++r) {
    text += base64_encode(ranks.token(static_cast<TokenId>(r)));
    text += ' ';
    text += std::to_string(r);
    text += '\n';
  }
  write_text_file(path, text);
}

}  // namespace moeserve

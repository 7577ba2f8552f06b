#include "tokenizer/corpus.h"

#include <array>
#include <string_view>
#include <utility>
#include <vector>

#include "util/files.h"

namespace moeserve::testing {
namespace {

// splitmix64: small, fast and the same everywhere.
class Random {
 public:
  explicit Random(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  size_t below(size_t n) { return static_cast<size_t>(next() % n); }
  size_t between(size_t lo, size_t hi) { return lo + below(hi - lo + 1); }
  template <typename T>
  const T& pick(const std::vector<T>& items) {
    return items[below(items.size())];
  }

 private:
  uint64_t state_;
};

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | cp >> 6);
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | cp >> 12);
    out += static_cast<char>(0x80 | (cp >> 6 & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | cp >> 18);
    out += static_cast<char>(0x80 | (cp >> 12 & 0x3F));
    out += static_cast<char>(0x80 | (cp >> 6 & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::vector<std::string> split(std::string_view text, char separator) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(separator, start);
    if (end == std::string_view::npos) end = text.size();
    if (end > start) parts.emplace_back(text.substr(start, end - start));
    start = end + 1;
  }
  return parts;
}

// Blocks whose letters, digits and marks kept their categories across Unicode versions.
constexpr std::array<std::pair<uint32_t, uint32_t>, 22> kBlocks = {{
    {0x00A1, 0x00FF}, {0x0100, 0x017F}, {0x0300, 0x036F}, {0x0370, 0x03FF}, {0x0400, 0x04FF},
    {0x05D0, 0x05EA}, {0x0621, 0x064A}, {0x0660, 0x0669}, {0x0900, 0x097F}, {0x0E01, 0x0E3A},
    {0x1100, 0x1159}, {0x2000, 0x206F}, {0x2100, 0x214F}, {0x2190, 0x23FF}, {0x3000, 0x303F},
    {0x3041, 0x3096}, {0x30A1, 0x30FA}, {0x4E00, 0x9FA5}, {0xAC00, 0xD7A3}, {0xFF01, 0xFF5E},
    {0x1F300, 0x1F5FF}, {0x1F600, 0x1F64F},
}};

const std::vector<std::string> kSpaces = {" ", " ", " ", "\t", "\n", "\r\n", "\r", "\u00A0", "\u3000",
                                          "\u2003", "\u0085", "\u2028", "\u180E", "\u200B", "\v", "\f"};
const std::vector<std::string> kSuffixes = {"s", "t", "re", "ve", "m", "ll", "d", "S", "T", "RE", "Ve", "vE",
                                            "M", "LL", "lL", "D", "x", ""};
const std::vector<uint32_t> kEmojiBases = {0x1F468, 0x1F469, 0x1F9D1, 0x1F466, 0x1F467, 0x2764, 0x1F48B,
                                           0x1F3F3, 0x1F3F4, 0x1F308, 0x2620, 0x1F4BB, 0x1F680, 0x1F373};

void append_whitespace_run(Random& r, std::string& out) {
  const size_t kind = r.below(5);
  if (kind == 0) {
    out.append(r.between(1, 300), ' ');
  } else if (kind == 1) {
    out.append(r.between(1, 40), '\t');
  } else if (kind == 2) {
    out.append(r.between(1, 30), '\n');
  } else {
    for (size_t i = r.between(1, 60); i > 0; --i) out += r.pick(kSpaces);
  }
}

void append_digits(Random& r, std::string& out) {
  const size_t length = r.between(1, 40);
  const uint32_t zero = std::array<uint32_t, 5>{'0', '0', 0x0660, 0x0966, 0xFF10}[r.below(5)];
  for (size_t i = 0; i < length; ++i) {
    append_utf8(out, zero + static_cast<uint32_t>(r.below(10)));
    if (r.below(12) == 0) out += r.pick(std::vector<std::string>{",", ".", " ", "_", "-", "e"});
  }
}

void append_contraction(Random& r, std::string& out, const std::vector<std::string>& words) {
  std::string word = r.pick(words);
  for (char& c : word) {
    if (c >= 'a' && c <= 'z' && r.below(3) == 0) c = static_cast<char>(c - 32);
  }
  out += word;
  out += r.below(6) == 0 ? "\u2019" : "'";
  out += r.pick(kSuffixes);
}

void append_emoji_sequence(Random& r, std::string& out) {
  const size_t kind = r.below(4);
  if (kind == 0) {  // ZWJ sequence, with optional skin tones and variation selectors
    for (size_t i = r.between(2, 5); i > 0; --i) {
      append_utf8(out, kEmojiBases[r.below(kEmojiBases.size())]);
      if (r.below(3) == 0) append_utf8(out, 0x1F3FB + static_cast<uint32_t>(r.below(5)));
      if (r.below(3) == 0) append_utf8(out, 0xFE0F);
      if (i > 1) append_utf8(out, 0x200D);
    }
  } else if (kind == 1) {  // flag: two regional indicators
    append_utf8(out, 0x1F1E6 + static_cast<uint32_t>(r.below(26)));
    append_utf8(out, 0x1F1E6 + static_cast<uint32_t>(r.below(26)));
  } else if (kind == 2) {  // keycap
    out += static_cast<char>('0' + r.below(10));
    append_utf8(out, 0xFE0F);
    append_utf8(out, 0x20E3);
  } else {
    append_utf8(out, 0x1F600 + static_cast<uint32_t>(r.below(0x50)));
  }
}

void append_random_characters(Random& r, std::string& out) {
  const auto& [lo, hi] = kBlocks[r.below(kBlocks.size())];
  for (size_t i = r.between(1, 30); i > 0; --i) append_utf8(out, lo + static_cast<uint32_t>(r.below(hi - lo + 1)));
}

std::string mixed_case(Random& r, const std::string& text) {
  std::string out = text;
  const size_t mode = r.below(3);
  for (char& c : out) {
    const bool lower = c >= 'a' && c <= 'z', upper = c >= 'A' && c <= 'Z';
    if (mode == 0 && lower) c = static_cast<char>(c - 32);
    if (mode == 1 && upper) c = static_cast<char>(c + 32);
    if (mode == 2 && (lower || upper) && r.below(2) == 0) c = static_cast<char>(c ^ 0x20);
  }
  return out;
}

}  // namespace

std::string tokenizer_corpus_seed(const std::string& source_dir) {
  return read_text_file(source_dir + "/tests/tokenizer/corpus_seed.txt");
}

std::string make_tokenizer_corpus(const std::string& seed_text, size_t min_bytes, uint64_t seed) {
  Random r(seed);
  // Paragraphs keep their lines; "## name" lines only separate the seed's sections.
  std::vector<std::string> paragraphs, words;
  std::string code;
  bool in_code = false;
  for (const std::string& line : split(seed_text, '\n')) {
    if (line.starts_with("## ")) {
      in_code = line == "## code";
      continue;
    }
    if (in_code) {
      code += line + "\n";
    } else {
      paragraphs.push_back(line);
      for (const std::string& w : split(line, ' ')) words.push_back(w);
    }
  }
  paragraphs.push_back(code);
  std::vector<std::string> ascii_words;
  for (const std::string& w : words) {
    if (!w.empty() && static_cast<unsigned char>(w[0]) < 0x80) ascii_words.push_back(w);
  }
  std::string out = seed_text;
  while (out.size() < min_bytes) {
    switch (r.below(10)) {
      case 0: out += r.pick(paragraphs); break;
      case 1: out += mixed_case(r, r.pick(paragraphs)); break;
      case 2:
        for (size_t i = r.between(3, 40); i > 0; --i) out += r.pick(words) + (r.below(8) == 0 ? "" : " ");
        break;
      case 3: append_whitespace_run(r, out); break;
      case 4: append_digits(r, out); break;
      case 5: append_contraction(r, out, ascii_words); break;
      case 6: append_emoji_sequence(r, out); break;
      case 7: append_random_characters(r, out); break;
      case 8: out += r.pick(kSpaces); break;
      default: out += r.pick(std::vector<std::string>{"", " ", "\n", "\n\n", "  \n", ". ", "/", "\\", "'"}); break;
    }
  }
  return out;
}

}  // namespace moeserve::testing

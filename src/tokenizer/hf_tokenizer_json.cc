// Hugging Face tokenizer.json: see tokenizer_files.h. Read with nlohmann's SAX interface: the file is ~27 MB,
// mostly "vocab" and "merges", which are checked as they stream past instead of being built into a DOM.
// Two kinds: GPT-OSS's (one Split, ignore_merges: tiktoken's rule over the vocab's ranks) and DeepSeek-V3's (a
// Sequence of several Splits, no ignore_merges: the merges list decides). The pre-tokenizer, which every file
// Hugging Face tokenizers writes puts before the model, tells them apart.
#include <fmt/format.h>

#include <array>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "tokenizer/tokenizer_files.h"
#include "util/bounded_read.h"
#include "util/error.h"
#include "util/files.h"
#include "util/json_parse.h"

namespace moeserve {
namespace {

// bytes_to_unicode (GPT-2 encoder.py): printable Latin-1 bytes stand for themselves, the other 68 bytes take
// code points 256, 257, ... in byte order.
struct ByteLevelAlphabet {
  std::array<uint32_t, 256> code_point{};
  std::array<int16_t, 324> byte{};  // code point -> byte, -1 outside the alphabet
  ByteLevelAlphabet() {
    byte.fill(-1);
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      code_point[b] = printable ? b : next++;
      byte[code_point[b]] = static_cast<int16_t>(b);
    }
  }
};
const ByteLevelAlphabet& alphabet() {
  static const ByteLevelAlphabet a;
  return a;
}

std::string json_quoted(std::string_view s) { return nlohmann::json(std::string(s)).dump(); }

// Leaf values outside vocab and merges, keyed by their path ("pre_tokenizer/pretokenizers/0/type").
using Leaves = std::map<std::string, nlohmann::json>;

class TokenizerJsonReader : public nlohmann::json_sax<nlohmann::json> {
 public:
  explicit TokenizerJsonReader(std::string path) : path_(std::move(path)) {}

  bool null() override { return leaf(nullptr); }
  bool boolean(bool v) override { return leaf(v); }
  bool number_integer(number_integer_t v) override { return leaf(v); }
  bool number_unsigned(number_unsigned_t v) override { return leaf(v); }
  bool number_float(number_float_t v, const string_t&) override { return leaf(v); }
  bool string(string_t& v) override { return leaf(v); }
  bool binary(binary_t&) override { return leaf(nullptr); }
  bool key(string_t& k) override {
    stack_.back().key = k;
    return true;
  }
  bool start_object(std::size_t) override { return open(false); }
  bool start_array(std::size_t) override { return open(true); }
  bool end_object() override {
    if (in_vocab()) vocab_done();
    stack_.pop_back();
    return true;
  }
  bool end_array() override {
    if (stack_.size() == 4 && in_merges()) {
      MOESERVE_CHECK(stack_[3].index == 1, "{}: merge {} is not a pair", path_, merges_);
      merge(pair_[0], pair_[1]);
    }
    stack_.pop_back();
    return true;
  }
  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& e) override {
    fail("{}: invalid JSON at byte {}: {}", path_, position, e.what());
  }

  TokenizerFileContents finish();

 private:
  struct Level {
    bool array;
    std::string key;  // objects: the current key
    long index = -1;  // arrays: the current element
  };

  void element_begins() {
    if (!stack_.empty() && stack_.back().array) ++stack_.back().index;
  }
  bool open(bool array) {
    MOESERVE_CHECK(!stack_.empty() || !array, "{}: the top level is not an object", path_);
    MOESERVE_CHECK(stack_.size() < static_cast<size_t>(kMaxJsonDepth), "{}: {} is nested deeper than {} levels",
                   path_, current_path(), kMaxJsonDepth);
    element_begins();
    stack_.push_back({array, {}, -1});
    return true;
  }
  std::string current_path() const {
    std::string p;
    for (const Level& l : stack_) p += (p.empty() ? "" : "/") + (l.array ? std::to_string(l.index) : l.key);
    return p;
  }
  bool in_vocab() const { return stack_.size() == 3 && stack_[0].key == "model" && stack_[1].key == "vocab"; }
  // DeepSeek-V3's kind: the pre-tokenizer is a Sequence of two or more Split steps (decided once, at the vocab).
  bool merges_list() {
    if (!merges_list_) {
      int splits = 0;
      for (auto it = leaves_.find("pre_tokenizer/pretokenizers/0/type"); it != leaves_.end() && it->second == "Split";
           it = leaves_.find(fmt::format("pre_tokenizer/pretokenizers/{}/type", ++splits))) {
      }
      merges_list_ = splits >= 2;
    }
    return *merges_list_;
  }
  bool in_merges() const { return stack_.size() >= 3 && stack_[0].key == "model" && stack_[1].key == "merges"; }

  template <typename V>
  bool leaf(V&& value) {
    MOESERVE_CHECK(!stack_.empty(), "{}: the top level is not an object", path_);
    element_begins();
    if (in_vocab() && !stack_[2].array) {
      vocab_entry(stack_[2].key, nlohmann::json(value));
    } else if (stack_.size() == 3 && in_merges()) {
      merge_text(nlohmann::json(value));
    } else if (stack_.size() == 4 && in_merges()) {
      MOESERVE_CHECK(stack_[3].index < 2, "{}: merge {} has more than two parts", path_, merges_);
      pair_[stack_[3].index] = nlohmann::json(value);
    } else {
      leaves_[current_path()] = nlohmann::json(std::forward<V>(value));
    }
    return true;
  }

  void vocab_entry(const std::string& key, const nlohmann::json& id) {
    MOESERVE_CHECK(id.is_number_unsigned(), "{}: vocab entry {} has id {}, not a token id", path_, json_quoted(key),
                   id.dump());
    const uint64_t rank = id.get<uint64_t>();
    std::string bytes;
    if (merges_list()) {
      MOESERVE_CHECK(rank < kMaxVocabulary, "{}: vocab entry {} has id {}, beyond {} tokens", path_, json_quoted(key),
                     rank, kMaxVocabulary);
      // An entry that is no byte-level string is an added token inside the vocab (DeepSeek's ids 0..2), checked
      // against added_tokens in finish; its name stands for its bytes.
      if (!byte_level_decode(key, bytes)) {
        vocab_specials_.emplace_back(rank, key);
        bytes = key;
      }
    } else {
      if (rank >= static_cast<uint64_t>(o200k::kMergeableTokens)) {
        vocab_specials_.emplace_back(rank, key);  // must be one of added_tokens (checked in finish)
        return;
      }
      MOESERVE_CHECK(byte_level_decode(key, bytes), "{}: vocab entry {} is not a byte-level string", path_,
                     json_quoted(key));
    }
    if (rank >= tokens_.size()) tokens_.resize(rank + 1);
    MOESERVE_CHECK(tokens_[rank].empty(), "{}: vocab id {} appears twice", path_, rank);
    tokens_[rank] = std::move(bytes);
  }
  void vocab_done() {
    for (size_t r = 0; r < tokens_.size(); ++r) MOESERVE_CHECK(!tokens_[r].empty(), "{}: vocab lacks id {}", path_, r);
    if (merges_list()) {
      ranks_ = RankTable(tokens_);
      return;
    }
    MOESERVE_CHECK(tokens_.size() == static_cast<size_t>(o200k::kMergeableTokens),
                   "{}: vocab has {} mergeable tokens, o200k_base has {}", path_, tokens_.size(),
                   o200k::kMergeableTokens);
    ranks_ = RankTable(tokens_);
    produced_.assign(tokens_.size(), false);
  }
  void merge_text(const nlohmann::json& text) {
    MOESERVE_CHECK(text.is_string(), "{}: merge {} is {}, not \"left right\" or [left, right]", path_, merges_,
                   text.dump());
    const std::string& s = text.get_ref<const std::string&>();
    const size_t space = s.find(' ');
    MOESERVE_CHECK(space != std::string::npos, "{}: merge {} {} has no space", path_, merges_, json_quoted(s));
    merge(s.substr(0, space), s.substr(space + 1));
  }
  void merge(const nlohmann::json& left, const nlohmann::json& right) {
    MOESERVE_CHECK(left.is_string() && right.is_string(), "{}: merge {} is not a pair of strings", path_, merges_);
    MOESERVE_CHECK(ranks_.size() > 0, "{}: model.merges must come after model.vocab", path_);
    std::string l, r;
    const bool decoded = byte_level_decode(left.get_ref<const std::string&>(), l) &&
                         byte_level_decode(right.get_ref<const std::string&>(), r);
    MOESERVE_CHECK(decoded, "{}: merge {} is not made of byte-level strings", path_, merges_);
    const TokenId merged = ranks_.find(l + r);
    MOESERVE_CHECK(ranks_.find(l) != RankTable::kNoRank && ranks_.find(r) != RankTable::kNoRank &&
                       merged != RankTable::kNoRank,
                   "{}: merge {} ({} {}) joins strings that are not in the vocab", path_, merges_, left.dump(),
                   right.dump());
    if (merges_list()) {
      merge_list_.push_back({ranks_.find(l), ranks_.find(r), merged});
      ++merges_;
      return;
    }
    MOESERVE_CHECK(merged >= last_merged_, "{}: merge {} is out of rank order: {} after {}", path_, merges_, merged,
                   last_merged_);
    last_merged_ = merged;
    produced_[merged] = true;
    ++merges_;
  }

  const nlohmann::json& require(const std::string& key, const nlohmann::json& expected) const {
    const auto it = leaves_.find(key);
    MOESERVE_CHECK(it != leaves_.end(), "{}: {} is missing (expected {})", path_, key, expected.dump());
    MOESERVE_CHECK(expected.is_null() || it->second == expected, "{}: {} is {}, moeserve supports only {}", path_,
                   key, it->second.dump(), expected.dump());
    return it->second;
  }

  TokenizerFileContents finish_merges_list();
  // added_tokens' (id, content) pairs; fails naming the entry when one lacks either, or when its id is beyond
  // last_id (`bound` says what last_id is, for the message).
  std::vector<std::pair<TokenId, std::string>> added_tokens(uint64_t last_id, std::string_view bound) const;
  void check_vocab_specials(const std::vector<std::pair<TokenId, std::string>>& added) const;

  // Ids of a merges-list vocabulary are bounded before anything is sized by them.
  static constexpr uint64_t kMaxVocabulary = uint64_t{1} << 22;

  std::string path_;
  std::optional<bool> merges_list_;
  std::vector<BpeMerge> merge_list_;
  std::vector<Level> stack_;
  Leaves leaves_;
  std::vector<std::string> tokens_;
  std::vector<std::pair<uint64_t, std::string>> vocab_specials_;
  RankTable ranks_;
  std::vector<bool> produced_;
  std::array<nlohmann::json, 2> pair_;
  TokenId last_merged_ = 0;
  size_t merges_ = 0;
};

std::vector<std::pair<TokenId, std::string>> TokenizerJsonReader::added_tokens(uint64_t last_id,
                                                                              std::string_view bound) const {
  std::vector<std::pair<TokenId, std::string>> added;
  for (int i = 0;; ++i) {
    const std::string prefix = fmt::format("added_tokens/{}/", i);
    const auto id = leaves_.find(prefix + "id");
    const auto content = leaves_.find(prefix + "content");
    if (id == leaves_.end() && content == leaves_.end()) break;
    MOESERVE_CHECK(id != leaves_.end() && content != leaves_.end() && id->second.is_number_unsigned() &&
                       content->second.is_string(),
                   "{}: added_tokens[{}] needs an id and a content", path_, i);
    const uint64_t value = id->second.get<uint64_t>();
    MOESERVE_CHECK(value <= last_id, "{}: added_tokens[{}] has id {}, beyond {} {}", path_, i, value, bound, last_id);
    added.emplace_back(static_cast<TokenId>(value), content->second.get<std::string>());
  }
  return added;
}

void TokenizerJsonReader::check_vocab_specials(const std::vector<std::pair<TokenId, std::string>>& added) const {
  for (const auto& special : vocab_specials_) {
    const uint64_t id = special.first;
    const std::string& key = special.second;
    const bool named = std::any_of(added.begin(), added.end(),
                                   [&](const auto& s) { return static_cast<uint64_t>(s.first) == id; });
    MOESERVE_CHECK(named, "{}: vocab id {} ({}) is neither mergeable nor an added token", path_, id, json_quoted(key));
  }
}

// DeepSeek-V3's kind: byte-level BPE by the merges list over a Split sequence; no normalizer; added tokens
// matched as they are (no lstrip, rstrip or single_word).
TokenizerFileContents TokenizerJsonReader::finish_merges_list() {
  require("model/type", "BPE");
  auto absent_or = [&](const std::string& key, const nlohmann::json& allowed) {
    const auto it = leaves_.find(key);
    MOESERVE_CHECK(it == leaves_.end() || it->second == allowed || it->second.is_null(),
                   "{}: {} is {}, moeserve supports only {}", path_, key,
                   it == leaves_.end() ? "" : it->second.dump(), allowed.dump());
  };
  absent_or("model/ignore_merges", false);
  absent_or("model/byte_fallback", false);
  absent_or("model/continuing_subword_prefix", nullptr);
  absent_or("model/end_of_word_suffix", nullptr);
  absent_or("model/dropout", nullptr);
  if (leaves_.contains("normalizer/type"))
    MOESERVE_CHECK(leaves_.at("normalizer/type") == "Sequence" && !leaves_.contains("normalizer/normalizers/0/type"),
                   "{}: only an empty normalizer Sequence is supported", path_);
  require("pre_tokenizer/type", "Sequence");
  TokenizerFileContents contents;
  int step = 0;
  for (;; ++step) {
    const std::string prefix = fmt::format("pre_tokenizer/pretokenizers/{}/", step);
    const auto type = leaves_.find(prefix + "type");
    if (type == leaves_.end() || type->second != "Split") break;
    require(prefix + "behavior", "Isolated");
    require(prefix + "invert", false);
    const nlohmann::json& pattern = require(prefix + "pattern/Regex", nullptr);
    MOESERVE_CHECK(pattern.is_string(), "{}: the Split pattern {} is not a string", path_, step);
    contents.split_patterns.push_back(pattern.get<std::string>());
  }
  const std::string byte_level = fmt::format("pre_tokenizer/pretokenizers/{}/", step);
  require(byte_level + "type", "ByteLevel");
  require(byte_level + "use_regex", false);
  absent_or(byte_level + "add_prefix_space", false);
  MOESERVE_CHECK(!leaves_.contains(fmt::format("pre_tokenizer/pretokenizers/{}/type", step + 1)),
                 "{}: unexpected pre-tokenizer after ByteLevel", path_);
  for (int i = 0; leaves_.contains(fmt::format("added_tokens/{}/id", i)); ++i)
    for (const char* flag : {"lstrip", "rstrip", "single_word"})
      absent_or(fmt::format("added_tokens/{}/{}", i, flag), false);
  contents.special_names = added_tokens(kMaxVocabulary - 1, "the largest vocabulary id moeserve reads,");
  check_vocab_specials(contents.special_names);
  for (size_t i = 0; i < contents.special_names.size(); ++i)
    if (const auto flag = leaves_.find(fmt::format("added_tokens/{}/special", i)); flag != leaves_.end() && flag->second == true)
      contents.special_flagged.push_back(contents.special_names[i].first);
  MOESERVE_CHECK(!merge_list_.empty(), "{}: model.merges is empty", path_);
  contents.merges = std::move(merge_list_);
  contents.mergeable = std::move(tokens_);
  return contents;
}

TokenizerFileContents TokenizerJsonReader::finish() {
  MOESERVE_CHECK(ranks_.size() > 0, "{}: model.vocab is missing", path_);
  if (merges_list()) return finish_merges_list();
  require("model/type", "BPE");
  require("model/ignore_merges", true);  // tiktoken: a piece that is a token is that token, whatever the merges
  for (size_t r = 256; r < produced_.size(); ++r) {
    if (ranks_.token(static_cast<TokenId>(r)).size() > 1) {
      MOESERVE_CHECK(produced_[r], "{}: no merge produces vocab id {} (truncated merges?)", path_, r);
    }
  }
  TokenizerFileContents contents;
  const bool sequence = leaves_.contains("pre_tokenizer/type") && leaves_.at("pre_tokenizer/type") == "Sequence";
  MOESERVE_CHECK(sequence, "{}: pre_tokenizer must be a Sequence of Split and ByteLevel", path_);
  require("pre_tokenizer/pretokenizers/0/type", "Split");
  require("pre_tokenizer/pretokenizers/0/behavior", "Isolated");
  require("pre_tokenizer/pretokenizers/0/invert", false);
  const nlohmann::json& pattern = require("pre_tokenizer/pretokenizers/0/pattern/Regex", nullptr);
  MOESERVE_CHECK(pattern.is_string(), "{}: the Split pattern is not a string", path_);
  contents.pattern = pattern.get<std::string>();
  require("pre_tokenizer/pretokenizers/1/type", "ByteLevel");
  require("pre_tokenizer/pretokenizers/1/use_regex", false);
  MOESERVE_CHECK(!leaves_.contains("pre_tokenizer/pretokenizers/2/type"), "{}: unexpected third pre-tokenizer",
                 path_);
  contents.special_names = added_tokens(o200k::kLastSpecial, "o200k_harmony's last id");
  check_vocab_specials(contents.special_names);
  contents.mergeable = std::move(tokens_);
  return contents;
}

// The splits of a token into two tokens, ordered as transformers' TikTokenConverter orders them.
void append_merges(const RankTable& ranks, TokenId rank, std::string& out) {
  const std::string_view token = ranks.token(rank);
  std::vector<std::tuple<TokenId, TokenId, size_t>> splits;
  for (size_t at = 1; at < token.size(); ++at) {
    const TokenId left = ranks.find(token.substr(0, at));
    const TokenId right = ranks.find(token.substr(at));
    if (left != RankTable::kNoRank && right != RankTable::kNoRank) splits.emplace_back(left, right, at);
  }
  std::sort(splits.begin(), splits.end());
  for (const auto& [left, right, at] : splits) {
    out += out.back() == '[' ? "\n    [" : ",\n    [";
    out += json_quoted(byte_level_encode(token.substr(0, at)));
    out += ", ";
    out += json_quoted(byte_level_encode(token.substr(at)));
    out += ']';
  }
}

}  // namespace

std::string byte_level_encode(std::string_view bytes) {
  std::string out;
  for (const char c : bytes) {
    const uint32_t cp = alphabet().code_point[static_cast<uint8_t>(c)];
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else {
      out += static_cast<char>(0xC0 | cp >> 6);
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }
  return out;
}

bool byte_level_decode(std::string_view text, std::string& bytes) {
  bytes.clear();
  for (size_t i = 0; i < text.size();) {
    const auto b0 = static_cast<uint8_t>(text[i]);
    uint32_t cp;
    if (b0 < 0x80) {
      cp = b0;
      i += 1;
    } else if ((b0 & 0xE0) == 0xC0 && i + 1 < text.size() && (static_cast<uint8_t>(text[i + 1]) & 0xC0) == 0x80) {
      cp = (b0 & 0x1Fu) << 6 | (static_cast<uint8_t>(text[i + 1]) & 0x3Fu);
      i += 2;
    } else {
      return false;
    }
    if (cp >= alphabet().byte.size() || alphabet().byte[cp] < 0) return false;
    bytes += static_cast<char>(alphabet().byte[cp]);
  }
  return !bytes.empty();
}

TokenizerFileContents read_hf_tokenizer_json(const std::string& path) {
  // GPT-OSS's tokenizer.json is 27 MiB.
  const std::string text = read_text_file(path, 256 * kMiB);
  TokenizerJsonReader reader(path);
  nlohmann::json::sax_parse(text, &reader);
  return reader.finish();
}

void write_hf_tokenizer_json(const Tokenizer& tokenizer, const std::string& path) {
  const RankTable& ranks = tokenizer.ranks();
  std::string out = "{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n  \"added_tokens\": [";
  for (TokenId id = o200k::kFirstSpecial; id <= o200k::kLastHfAddedToken; ++id) {
    const std::string_view name = id == o200k::kEndOfPrompt && tokenizer.token_bytes(id).starts_with("<|reserved_")
                                      ? o200k::kEndOfPromptName
                                      : tokenizer.token_bytes(id);
    out += fmt::format(
        "{}\n    {{\"id\": {}, \"content\": {}, \"single_word\": false, \"lstrip\": false, \"rstrip\": false, "
        "\"normalized\": false, \"special\": true}}",
        id == o200k::kFirstSpecial ? "" : ",", id, json_quoted(name));
  }
  out += fmt::format(
      "\n  ],\n  \"normalizer\": null,\n  \"pre_tokenizer\": {{\"type\": \"Sequence\", \"pretokenizers\": ["
      "{{\"type\": \"Split\", \"pattern\": {{\"Regex\": {}}}, \"behavior\": \"Isolated\", \"invert\": false}}, "
      "{{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true, \"use_regex\": false}}]}},\n"
      "  \"post_processor\": {{\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"trim_offsets\": false, "
      "\"use_regex\": true}},\n"
      "  \"decoder\": {{\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"trim_offsets\": true, "
      "\"use_regex\": true}},\n"
      "  \"model\": {{\n    \"type\": \"BPE\", \"dropout\": null, \"unk_token\": null, "
      "\"continuing_subword_prefix\": null, \"end_of_word_suffix\": null, \"fuse_unk\": false, "
      "\"byte_fallback\": false, \"ignore_merges\": true,\n    \"vocab\": {{",
      json_quoted(tokenizer.pattern()));
  for (size_t r = 0; r < ranks.size(); ++r) {
    out += fmt::format("{}\n      {}: {}", r == 0 ? "" : ",", json_quoted(byte_level_encode(ranks.token(TokenId(r)))), r);
  }
  out += "\n    },\n    \"merges\": [";
  for (size_t r = 0; r < ranks.size(); ++r) append_merges(ranks, static_cast<TokenId>(r), out);
  out += "\n    ]\n  }\n}\n";
  write_text_file(path, out);
}

void write_tokenizer_files(const Tokenizer& tokenizer, const std::string& model_dir) {
  std::filesystem::create_directories(model_dir);
  write_hf_tokenizer_json(tokenizer, model_dir + "/tokenizer.json");
}

}  // namespace moeserve

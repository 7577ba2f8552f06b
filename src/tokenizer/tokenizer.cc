#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>

#include "tokenizer/bpe.h"
#include "tokenizer/hf_bpe_model.h"
#include "tokenizer/tokenizer_files.h"
#include "tokenizer/utf8.h"
#include "util/error.h"
#include "util/files.h"

#ifndef MOESERVE_O200K_RANKS_DEFAULT
#define MOESERVE_O200K_RANKS_DEFAULT ""
#endif

namespace moeserve {
namespace {

// The BPE results of recent multi-token pieces, per thread (the tokenizer is shared between threads): words
// repeat, and a hash look-up is cheaper than the merge loop. Cleared when it grows past kCachePieces, or when
// another tokenizer uses the thread.
struct PieceCache {
  static constexpr size_t kCachePieces = 1 << 16;
  static constexpr size_t kLongestPiece = 64;
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return RankTable::hash(s); }
  };
  uint64_t owner = 0;
  std::unordered_map<std::string, std::pair<uint32_t, uint32_t>, Hash, std::equal_to<>> pieces;  // -> tokens
  std::vector<TokenId> tokens;
};
thread_local PieceCache piece_cache;
std::atomic<uint64_t> next_tokenizer_id{1};

void check_utf8(std::string_view text) {
  const size_t bad = find_invalid_utf8(text);
  MOESERVE_CHECK(bad == std::string_view::npos, "text is not valid UTF-8: ill-formed byte 0x{:02X} at byte offset {}",
                 static_cast<uint8_t>(text[bad]), bad);
}

}  // namespace

bool AllowedSpecial::allows(TokenId id) const {
  return all_ || std::find(ids_.begin(), ids_.end(), id) != ids_.end();
}

Tokenizer::Tokenizer(TokenizerFileContents contents) : ranks_(contents.mergeable), id_(next_tokenizer_id++) {
  if (!contents.merges.empty()) {
    hf_bpe_ = std::make_unique<HfBpeModel>(std::move(contents.split_patterns), contents.merges, ranks_);
    init_added_tokens(contents);
    return;
  }
  pretokenizer_ = std::make_unique<Pretokenizer>(contents.pattern);
  MOESERVE_CHECK(ranks_.size() == static_cast<size_t>(o200k::kMergeableTokens),
                 "o200k_harmony needs {} mergeable ranks, the tokenizer file has {}", o200k::kMergeableTokens,
                 ranks_.size());
  for (int b = 0; b < 256; ++b) {
    const char byte = static_cast<char>(b);
    MOESERVE_CHECK(ranks_.find(std::string_view(&byte, 1)) != RankTable::kNoRank,
                   "the tokenizer's ranks lack the single byte 0x{:02X}, which byte-level BPE needs", b);
  }
  for (TokenId id = o200k::kFirstSpecial; id <= o200k::kLastSpecial; ++id) {
    special_names_.push_back(o200k::special_token_name(id));
  }
  for (const auto& [id, name] : contents.special_names) {
    MOESERVE_CHECK(is_special(id), "special token {} has id {}, outside o200k_harmony's {}..{}", name, id,
                   o200k::kFirstSpecial, o200k::kLastSpecial);
    std::string& harmony_name = special_names_[id - o200k::kFirstSpecial];
    // Harmony's named tokens carry the format; a file may rename only reserved slots (Hugging Face's GPT-OSS
    // tokenizer names 200018 <|endofprompt|>).
    MOESERVE_CHECK(name == harmony_name || harmony_name.starts_with("<|reserved_"),
                   "special token {} is {} in the tokenizer file but {} in o200k_harmony", id, name, harmony_name);
    harmony_name = name;
  }
  for (size_t i = 0; i < special_names_.size(); ++i) {
    longest_special_name_ = std::max(longest_special_name_, special_names_[i].size());
    const auto [it, inserted] =
        special_ids_.emplace(special_names_[i], static_cast<TokenId>(o200k::kFirstSpecial + i));
    MOESERVE_CHECK(inserted, "special token name {} is used twice", special_names_[i]);
  }
}

Tokenizer::~Tokenizer() = default;

void Tokenizer::init_added_tokens(const TokenizerFileContents& contents) {
  added_by_first_byte_.resize(256);
  special_flagged_.insert(contents.special_flagged.begin(), contents.special_flagged.end());
  for (const auto& [id, name] : contents.special_names) {
    MOESERVE_CHECK(id >= 0 && !name.empty(), "added token {} has id {} or an empty name", name, id);
    MOESERVE_CHECK(static_cast<size_t>(id) >= ranks_.size() || ranks_.token(id) == name,
                   "added token {} has id {}, which the vocab gives to another token", name, id);
    const auto [it, inserted] = added_names_.emplace(id, name);
    MOESERVE_CHECK(inserted, "added token id {} is used twice", id);
    const auto [by_name, new_name] = special_ids_.emplace(it->second, id);
    MOESERVE_CHECK(new_name, "added token name {} is used twice", name);
    added_by_first_byte_[static_cast<uint8_t>(name[0])].emplace_back(it->second, id);
  }
  for (auto& candidates : added_by_first_byte_)
    std::sort(candidates.begin(), candidates.end(),
              [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
}

std::unique_ptr<Tokenizer> Tokenizer::from_file(const std::string& path) {
  TokenizerFileContents contents;
  if (path.ends_with(".json")) {
    contents = read_hf_tokenizer_json(path);
  } else {
    contents.mergeable = read_tiktoken_ranks(path);
  }
  // The readers name the file; what the tokenizer checks of their contents (ranks, special tokens, the pattern)
  // must too.
  try {
    return std::make_unique<Tokenizer>(std::move(contents));
  } catch (const Error& e) {
    fail("{}: {}", path, e.what());
  }
}

std::unique_ptr<Tokenizer> Tokenizer::from_model_dir(const std::string& dir) {
  for (const char* name : {"tokenizer.json", "o200k_base.tiktoken"}) {
    const std::string path = dir + "/" + name;
    if (file_exists(path)) return from_file(path);
  }
  fail("{} has no tokenizer: expected tokenizer.json or o200k_base.tiktoken", dir);
}

std::string Tokenizer::default_ranks_path() {
  const char* env = std::getenv("MOESERVE_O200K_RANKS");
  return env != nullptr && *env != '\0' ? env : MOESERVE_O200K_RANKS_DEFAULT;
}

std::unique_ptr<Tokenizer> Tokenizer::o200k_harmony() {
  const std::string path = default_ranks_path();
  MOESERVE_CHECK(!path.empty() && file_exists(path),
                 "o200k_base ranks not found at \"{}\": run scripts/setup.sh, or set MOESERVE_O200K_RANKS", path);
  return from_file(path);
}

void Tokenizer::encode_checked_into(std::string_view text, std::vector<TokenId>& out) const {
  if (hf_bpe_) {
    hf_bpe_->encode(text, out);
    return;
  }
  PieceCache& cache = piece_cache;
  if (cache.owner != id_) {
    cache.pieces.clear();
    cache.tokens.clear();
    cache.owner = id_;
  }
  pretokenizer_->split(text, [&](std::string_view piece) {
    const TokenId whole = ranks_.find(piece);
    if (whole != RankTable::kNoRank) {
      out.push_back(whole);
      return;
    }
    if (piece.size() > PieceCache::kLongestPiece) {
      byte_pair_encode(ranks_, piece, out);
      return;
    }
    if (const auto hit = cache.pieces.find(piece); hit != cache.pieces.end()) {
      const auto [first, count] = hit->second;
      out.insert(out.end(), cache.tokens.begin() + first, cache.tokens.begin() + first + count);
      return;
    }
    const size_t before = out.size();
    byte_pair_encode(ranks_, piece, out);
    if (cache.pieces.size() >= PieceCache::kCachePieces) {
      cache.pieces.clear();
      cache.tokens.clear();
    }
    cache.pieces.emplace(piece, std::pair(static_cast<uint32_t>(cache.tokens.size()),
                                          static_cast<uint32_t>(out.size() - before)));
    cache.tokens.insert(cache.tokens.end(), out.begin() + static_cast<std::ptrdiff_t>(before), out.end());
  });
}

void Tokenizer::encode_ordinary_into(std::string_view text, std::vector<TokenId>& out) const {
  check_utf8(text);
  encode_checked_into(text, out);
}

std::vector<TokenId> Tokenizer::encode_ordinary(std::string_view text) const {
  std::vector<TokenId> out;
  out.reserve(text.size() / 3);
  encode_ordinary_into(text, out);
  return out;
}

std::vector<TokenId> Tokenizer::encode(std::string_view text, const AllowedSpecial& allowed) const {
  if (hf_bpe_) return encode_with_added_tokens(text, allowed);
  check_utf8(text);
  std::vector<TokenId> out;
  out.reserve(text.size() / 3);
  size_t ordinary_start = 0;
  size_t search = 0;
  // Special tokens are "<|name|>" with no "|>" inside, so each candidate ends at the first "|>" after "<|". That
  // "|>" serves every "<|" before it (found once, not once per "<|": text like "<|<|<|..." stays linear), and a
  // candidate longer than the longest name is no token.
  size_t close = 0;
  bool close_found = false;
  while (true) {
    const size_t open = text.find("<|", search);
    if (open == std::string_view::npos) break;
    if (!close_found || close < open + 2) {
      close = text.find("|>", open + 2);
      close_found = true;
    }
    if (close == std::string_view::npos) break;
    const auto it = close + 2 - open <= longest_special_name_ ? special_ids_.find(text.substr(open, close + 2 - open))
                                                              : special_ids_.end();
    if (it == special_ids_.end()) {
      search = open + 1;
      continue;
    }
    MOESERVE_CHECK(allowed.allows(it->second), "special token {} at byte offset {} is not allowed in this text",
                   it->first, open);
    encode_checked_into(text.substr(ordinary_start, open - ordinary_start), out);
    out.push_back(it->second);
    ordinary_start = search = close + 2;
  }
  encode_checked_into(text.substr(ordinary_start), out);
  return out;
}

// Added tokens are cut out of the text first, each time the longest one that starts leftmost (Hugging Face
// tokenizers' AddedVocabulary, transformers.js's DictionarySplitter), and the text between them is ordinary.
std::vector<TokenId> Tokenizer::encode_with_added_tokens(std::string_view text, const AllowedSpecial& allowed) const {
  check_utf8(text);
  std::vector<TokenId> out;
  out.reserve(text.size() / 3);
  size_t ordinary_start = 0;
  for (size_t i = 0; i < text.size();) {
    const std::pair<std::string_view, TokenId>* found = nullptr;
    for (const auto& candidate : added_by_first_byte_[static_cast<uint8_t>(text[i])]) {
      if (text.compare(i, candidate.first.size(), candidate.first) == 0) {
        found = &candidate;
        break;
      }
    }
    if (found == nullptr) {
      ++i;
      continue;
    }
    MOESERVE_CHECK(allowed.allows(found->second), "special token {} at byte offset {} is not allowed in this text",
                   found->first, i);
    encode_checked_into(text.substr(ordinary_start, i - ordinary_start), out);
    out.push_back(found->second);
    i += found->first.size();
    ordinary_start = i;
  }
  encode_checked_into(text.substr(ordinary_start), out);
  return out;
}

bool Tokenizer::is_special(TokenId id) const {
  if (hf_bpe_) return added_names_.contains(id);
  return id >= o200k::kFirstSpecial && id <= o200k::kLastSpecial;
}

const std::string& Tokenizer::pattern() const {
  MOESERVE_CHECK(pretokenizer_ != nullptr, "this tokenizer pre-tokenises by a Split sequence, not one pattern");
  return pretokenizer_->pattern();
}

std::string_view Tokenizer::token_bytes(TokenId id) const {
  if (hf_bpe_) {
    if (const auto it = added_names_.find(id); it != added_names_.end()) return it->second;
    MOESERVE_CHECK(id >= 0, "token id {} is negative", id);
    // An id with no token decodes to nothing, as Hugging Face tokenizers' decode skips it: DeepSeek-V3's embedding
    // has 465 rows past the tokenizer's last id, which a model may still sample.
    return static_cast<size_t>(id) < ranks_.size() ? ranks_.token(id) : std::string_view();
  }
  if (id >= 0 && id < o200k::kMergeableTokens) return ranks_.token(id);
  MOESERVE_CHECK(is_special(id), "token id {} is not in o200k_harmony (0..{})", id, o200k::kLastSpecial);
  return special_names_[id - o200k::kFirstSpecial];
}

std::string Tokenizer::decode_bytes(std::span<const TokenId> ids) const {
  std::string out;
  for (TokenId id : ids) out += token_bytes(id);
  return out;
}

std::string Tokenizer::decode(std::span<const TokenId> ids) const { return utf8_lossy(decode_bytes(ids)); }

std::string Tokenizer::decode_skipping_special(std::span<const TokenId> ids) const {
  std::vector<TokenId> kept;
  for (TokenId id : ids)
    if (hf_bpe_ ? !special_flagged_.contains(id) : !is_special(id)) kept.push_back(id);
  return decode(kept);
}

std::string Tokenizer::decode_utf8(std::span<const TokenId> ids) const {
  std::string bytes = decode_bytes(ids);
  const size_t bad = find_invalid_utf8(bytes);
  MOESERVE_CHECK(bad == std::string::npos, "tokens decode to invalid UTF-8 (ill-formed byte at offset {})", bad);
  return bytes;
}

std::optional<TokenId> Tokenizer::special_id(std::string_view name) const {
  const auto it = special_ids_.find(name);
  if (it == special_ids_.end()) return std::nullopt;
  return it->second;
}

}  // namespace moeserve

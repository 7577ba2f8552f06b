// The o200k_harmony tokenizer: encode text to token ids and decode ids to text, exactly as tiktoken does. Also a
// Hugging Face tokenizer.json that merges by its merges list through a Split pre-tokenizer sequence (DeepSeek-V3/R1:
// hf_bpe_model.h), whose added tokens may take any id: encoded as Hugging Face tokenizers and transformers.js do.
//
// Input text must be valid UTF-8: encode rejects anything else with an Error naming the byte offset of the first
// ill-formed byte (tiktoken's callers hand it Unicode strings, so ill-formed input never reaches it; refusing it
// here keeps a malformed request from silently becoming different text). Decoding may produce ill-formed UTF-8
// when ids split a character: decode_bytes returns the raw bytes, decode replaces ill-formed parts by U+FFFD,
// decode_utf8 rejects them, and IncrementalDecoder (incremental_decoder.h) streams without splitting characters.
// A Tokenizer is immutable once built: threads may share one (the BPE piece cache is per thread).
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "tokenizer/merge_bpe.h"
#include "tokenizer/o200k.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/rank_table.h"

namespace moeserve {

// What a tokenizer file provides.
struct TokenizerFileContents {
  std::vector<std::string> mergeable;  // token bytes by rank (merges: added tokens inside the vocab hold their name)
  std::string pattern{o200k::kPattern};
  // Special tokens the file names (tokenizer.json's added_tokens); the rest keep harmony's names.
  std::vector<std::pair<TokenId, std::string>> special_names;
  // Non-empty for a tokenizer.json that merges by its merges list (DeepSeek-V3): the merges by rank and the Split
  // pre-tokenizer sequence (instead of `pattern`). special_names are then all of its added tokens, which encode()
  // finds leftmost-longest in the text, and no harmony name applies.
  std::vector<BpeMerge> merges;
  std::vector<std::string> split_patterns;
  // The added tokens marked "special" (BOS, EOS, placeholders), which Hugging Face's decode with
  // skip_special_tokens=True drops.
  std::vector<TokenId> special_flagged;
};

class HfBpeModel;

// Which special tokens encode() may produce from their text.
class AllowedSpecial {
 public:
  static AllowedSpecial all() { return AllowedSpecial(true); }
  static AllowedSpecial none() { return AllowedSpecial(false); }
  AllowedSpecial& add(TokenId id) {
    ids_.push_back(id);
    return *this;
  }
  bool allows(TokenId id) const;

 private:
  explicit AllowedSpecial(bool all) : all_(all) {}
  bool all_;
  std::vector<TokenId> ids_;
};

class Tokenizer {
 public:
  explicit Tokenizer(TokenizerFileContents contents);
  ~Tokenizer();

  // A tokenizer file: tokenizer.json (Hugging Face) when the name ends in .json, else a tiktoken rank file.
  static std::unique_ptr<Tokenizer> from_file(const std::string& path);
  // A model directory: its tokenizer.json, as GPT-OSS checkpoints ship it, else its o200k_base.tiktoken.
  static std::unique_ptr<Tokenizer> from_model_dir(const std::string& dir);
  // The o200k_base ranks that scripts/setup.sh converts (MOESERVE_O200K_RANKS overrides the path).
  static std::unique_ptr<Tokenizer> o200k_harmony();
  static std::string default_ranks_path();

  // All text is ordinary: special-token text is encoded as the characters it is made of.
  std::vector<TokenId> encode_ordinary(std::string_view text) const;
  void encode_ordinary_into(std::string_view text, std::vector<TokenId>& out) const;
  // Special-token text becomes its special token where allowed; elsewhere it is an error (as tiktoken's
  // default disallowed_special="all" is), naming the token and its byte offset.
  std::vector<TokenId> encode(std::string_view text, const AllowedSpecial& allowed) const;

  // The bytes of one token (special tokens: their name). Errors for ids outside the vocabulary
  // (o200k_harmony: 0..o200k::kLastSpecial).
  std::string_view token_bytes(TokenId id) const;
  std::string decode_bytes(std::span<const TokenId> ids) const;
  std::string decode(std::span<const TokenId> ids) const;       // ill-formed UTF-8 replaced by U+FFFD
  std::string decode_utf8(std::span<const TokenId> ids) const;  // ill-formed UTF-8 is an error
  // decode without the special tokens, as Hugging Face's decode(ids, skip_special_tokens=True): a merges-list
  // tokenizer drops the added tokens its file marks special; o200k_harmony drops every special token.
  std::string decode_skipping_special(std::span<const TokenId> ids) const;

  bool is_special(TokenId id) const;
  std::optional<TokenId> special_id(std::string_view name) const;

  const RankTable& ranks() const { return ranks_; }
  const std::string& pattern() const;  // the tiktoken-style pattern (not for a merges-list tokenizer)
  bool merges_by_list() const { return hf_bpe_ != nullptr; }

 private:
  void encode_checked_into(std::string_view text, std::vector<TokenId>& out) const;
  void init_added_tokens(const TokenizerFileContents& contents);
  std::vector<TokenId> encode_with_added_tokens(std::string_view text, const AllowedSpecial& allowed) const;

  RankTable ranks_;
  std::unique_ptr<Pretokenizer> pretokenizer_;
  std::vector<std::string> special_names_;  // index id - o200k::kFirstSpecial
  std::unordered_map<std::string_view, TokenId> special_ids_;
  size_t longest_special_name_ = 0;
  uint64_t id_;  // distinguishes tokenizers in the per-thread piece cache
  // A tokenizer.json that merges by its list: the model, its added tokens by id and, per first byte, their names
  // longest first (for the leftmost-longest search).
  std::unique_ptr<HfBpeModel> hf_bpe_;
  std::unordered_map<TokenId, std::string> added_names_;
  std::unordered_set<TokenId> special_flagged_;
  std::vector<std::vector<std::pair<std::string_view, TokenId>>> added_by_first_byte_;
};

}  // namespace moeserve

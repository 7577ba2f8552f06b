// The ordinary-text pipeline of a Hugging Face byte-level BPE tokenizer.json that merges by its merges list
// (DeepSeek-V3/R1): the Split pre-tokenizer sequence (split_pretokenizer.h), then each piece's bytes through the
// merges (merge_bpe.h). No whole-piece shortcut: without ignore_merges a piece that is itself a token is still
// merged pair by pair, as Hugging Face tokenizers and transformers.js do. Added tokens are the Tokenizer's concern.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/merge_bpe.h"
#include "tokenizer/rank_table.h"
#include "tokenizer/split_pretokenizer.h"

namespace moeserve {

class HfBpeModel {
 public:
  // ranks: every token's bytes (each of the 256 single bytes must be one).
  HfBpeModel(std::vector<std::string> split_patterns, std::span<const BpeMerge> merges, const RankTable& ranks);

  // Appends the tokens of text (valid UTF-8, all ordinary) to out.
  void encode(std::string_view text, std::vector<TokenId>& out) const;

  const SplitPretokenizer& pretokenizer() const { return pretokenizer_; }

 private:
  SplitPretokenizer pretokenizer_;
  MergeTable merges_;
  std::vector<TokenId> byte_token_;  // [256]
  uint64_t id_;                      // owner of the per-thread piece cache
};

}  // namespace moeserve

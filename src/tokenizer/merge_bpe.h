// Byte-pair encoding by a merges list, as Hugging Face tokenizers' BPE model (and transformers.js's) defines it
// for a tokenizer.json without ignore_merges (DeepSeek-V3's): a piece starts as single bytes; the adjacent pair
// with the lowest merge rank (its index in model.merges), leftmost on ties, is replaced by its merged token until
// no adjacent pair is a merge. Unlike tiktoken's rule (bpe.h), only listed pairs merge: the concatenation of two
// adjacent parts being a token is not enough.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/rank_table.h"

namespace moeserve {

// One entry of model.merges: left + right make merged.
struct BpeMerge {
  TokenId left;
  TokenId right;
  TokenId merged;
};

class MergeTable {
 public:
  struct Merge {
    uint32_t rank;
    TokenId merged;
  };

  MergeTable() = default;
  // merges[i] has rank i.
  explicit MergeTable(std::span<const BpeMerge> merges);

  const Merge* find(TokenId left, TokenId right) const {
    const auto it = merges_.find(key(left, right));
    return it == merges_.end() ? nullptr : &it->second;
  }
  size_t size() const { return merges_.size(); }

 private:
  static uint64_t key(TokenId left, TokenId right) {
    return static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32 | static_cast<uint32_t>(right);
  }
  std::unordered_map<uint64_t, Merge> merges_;
};

// Appends the tokens of piece (non-empty) to out; byte_token[b] is the token of the single byte b.
void merge_bpe_encode(const MergeTable& merges, const std::vector<TokenId>& byte_token, std::string_view piece,
                      std::vector<TokenId>& out);

}  // namespace moeserve

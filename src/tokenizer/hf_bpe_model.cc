#include "tokenizer/hf_bpe_model.h"

#include <atomic>
#include <unordered_map>

#include "util/error.h"

namespace moeserve {
namespace {

// Recent pieces' tokens, per thread: words repeat, and a look-up is cheaper than the merges. Pieces longer than
// kLongestCached bytes are not kept (they rarely repeat); the cache is emptied past kMaxPieces entries or when
// another model uses the thread.
struct MergeCache {
  static constexpr size_t kMaxPieces = 1 << 16;
  static constexpr size_t kLongestCached = 64;
  uint64_t owner = 0;
  std::unordered_map<std::string, std::vector<TokenId>> pieces;
};
thread_local MergeCache merge_cache;
std::atomic<uint64_t> next_model_id{1};

}  // namespace

HfBpeModel::HfBpeModel(std::vector<std::string> split_patterns, std::span<const BpeMerge> merges,
                       const RankTable& ranks)
    : pretokenizer_(std::move(split_patterns)), merges_(merges), byte_token_(256), id_(next_model_id++) {
  for (int b = 0; b < 256; ++b) {
    const char byte = static_cast<char>(b);
    byte_token_[b] = ranks.find(std::string_view(&byte, 1));
    MOESERVE_CHECK(byte_token_[b] != RankTable::kNoRank,
                   "the tokenizer's vocab lacks the single byte 0x{:02X}, which byte-level BPE needs", b);
  }
}

void HfBpeModel::encode(std::string_view text, std::vector<TokenId>& out) const {
  MergeCache& cache = merge_cache;
  if (cache.owner != id_) {
    cache.pieces.clear();
    cache.owner = id_;
  }
  pretokenizer_.split(text, [&](std::string_view piece) {
    if (piece.size() > MergeCache::kLongestCached) {
      merge_bpe_encode(merges_, byte_token_, piece, out);
      return;
    }
    if (const auto hit = cache.pieces.find(std::string(piece)); hit != cache.pieces.end()) {
      out.insert(out.end(), hit->second.begin(), hit->second.end());
      return;
    }
    const size_t before = out.size();
    merge_bpe_encode(merges_, byte_token_, piece, out);
    if (cache.pieces.size() >= MergeCache::kMaxPieces) cache.pieces.clear();
    cache.pieces.emplace(std::string(piece), std::vector<TokenId>(out.begin() + static_cast<std::ptrdiff_t>(before), out.end()));
  });
}

}  // namespace moeserve

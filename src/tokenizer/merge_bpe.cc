#include "tokenizer/merge_bpe.h"

#include <queue>

namespace moeserve {

MergeTable::MergeTable(std::span<const BpeMerge> merges) {
  merges_.reserve(merges.size());
  // A pair listed twice keeps its last rank, as both Hugging Face tokenizers and transformers.js build the map.
  for (size_t i = 0; i < merges.size(); ++i)
    merges_.insert_or_assign(key(merges[i].left, merges[i].right), Merge{static_cast<uint32_t>(i), merges[i].merged});
}

void merge_bpe_encode(const MergeTable& merges, const std::vector<TokenId>& byte_token, std::string_view piece,
                      std::vector<TokenId>& out) {
  const uint32_t n = static_cast<uint32_t>(piece.size());
  // Part i starts at byte i while alive; next[i] is the start of the part after it (n at the end).
  thread_local std::vector<TokenId> token;
  thread_local std::vector<uint32_t> next, prev;
  token.resize(n);
  next.resize(n);
  prev.resize(n);
  for (uint32_t i = 0; i < n; ++i) {
    token[i] = byte_token[static_cast<uint8_t>(piece[i])];
    next[i] = i + 1;
    prev[i] = i == 0 ? UINT32_MAX : i - 1;
  }
  struct Candidate {
    uint32_t rank;
    uint32_t start;
    TokenId left, right;  // the pair when pushed; stale once either part has changed
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : start > o.start; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto push_pair = [&](uint32_t start) {
    if (start == UINT32_MAX || next[start] >= n) return;
    const TokenId left = token[start], right = token[next[start]];
    if (const MergeTable::Merge* m = merges.find(left, right)) heap.push({m->rank, start, left, right});
  };
  for (uint32_t i = 0; i + 1 < n; ++i) push_pair(i);
  std::vector<bool> alive(n, true);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    // A part only ever grows, so its token changes whenever it does: equal tokens mean the same two parts.
    if (!alive[c.start] || next[c.start] >= n || token[c.start] != c.left || token[next[c.start]] != c.right)
      continue;
    const uint32_t right = next[c.start];
    token[c.start] = merges.find(c.left, c.right)->merged;
    alive[right] = false;
    next[c.start] = next[right];
    if (next[right] < n) prev[next[right]] = c.start;
    push_pair(prev[c.start]);
    push_pair(c.start);
  }
  for (uint32_t i = 0; i < n; i = next[i]) out.push_back(token[i]);
}

}  // namespace moeserve

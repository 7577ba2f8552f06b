#include "tokenizer/bpe.h"

#include <cstdint>
#include <queue>

namespace moeserve {

void byte_pair_encode_scan(const RankTable& ranks, std::string_view piece, std::vector<TokenId>& out) {
  struct Part {
    uint32_t start;
    TokenId rank;  // rank of the pair that starts here: piece[start, start of the part after next)
  };
  thread_local std::vector<Part> parts;
  parts.clear();
  const size_t n = piece.size();
  auto pair_rank = [&](size_t i) -> TokenId {
    if (i + 2 >= parts.size()) return RankTable::kNoRank;
    return ranks.find(piece.substr(parts[i].start, parts[i + 2].start - parts[i].start));
  };
  for (size_t i = 0; i <= n; ++i) parts.push_back({static_cast<uint32_t>(i), RankTable::kNoRank});
  for (size_t i = 0; i + 1 < n; ++i) parts[i].rank = ranks.find(piece.substr(i, 2));
  while (parts.size() > 2) {
    TokenId best = RankTable::kNoRank;
    size_t at = 0;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      if (parts[i].rank < best) {
        best = parts[i].rank;
        at = i;
      }
    }
    if (best == RankTable::kNoRank) break;
    parts.erase(parts.begin() + static_cast<std::ptrdiff_t>(at) + 1);
    parts[at].rank = pair_rank(at);
    if (at > 0) parts[at - 1].rank = pair_rank(at - 1);
  }
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    out.push_back(ranks.find(piece.substr(parts[i].start, parts[i + 1].start - parts[i].start)));
  }
}

void byte_pair_encode_heap(const RankTable& ranks, std::string_view piece, std::vector<TokenId>& out) {
  const uint32_t n = static_cast<uint32_t>(piece.size());
  // Part i starts at byte i while alive; next[i] is the start of the part after it (n at the end).
  std::vector<uint32_t> next(n), prev(n);
  std::vector<bool> alive(n, true);
  for (uint32_t i = 0; i < n; ++i) {
    next[i] = i + 1;
    prev[i] = i == 0 ? UINT32_MAX : i - 1;
  }
  struct Candidate {
    TokenId rank;
    uint32_t start;
    uint32_t end;  // the pair was piece[start, end); stale once either part has changed
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : start > o.start; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto push_pair = [&](uint32_t start) {
    if (start == UINT32_MAX || next[start] >= n) return;
    const uint32_t end = next[next[start]];
    const TokenId rank = ranks.find(piece.substr(start, end - start));
    if (rank != RankTable::kNoRank) heap.push({rank, start, end});
  };
  for (uint32_t i = 0; i + 1 < n; ++i) push_pair(i);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    if (!alive[c.start] || next[c.start] >= n || next[next[c.start]] != c.end) continue;
    const uint32_t right = next[c.start];
    alive[right] = false;
    next[c.start] = c.end;
    if (c.end < n) prev[c.end] = c.start;
    push_pair(c.start);
    push_pair(prev[c.start]);
  }
  for (uint32_t i = 0; i < n; i = next[i]) out.push_back(ranks.find(piece.substr(i, next[i] - i)));
}

void byte_pair_encode_merging(const RankTable& ranks, std::string_view piece, std::vector<TokenId>& out) {
  if (piece.size() <= kScanLimit) {
    byte_pair_encode_scan(ranks, piece, out);
  } else {
    byte_pair_encode_heap(ranks, piece, out);
  }
}

void byte_pair_encode(const RankTable& ranks, std::string_view piece, std::vector<TokenId>& out) {
  if (piece.size() <= kScanLimit) {
    byte_pair_encode_scan(ranks, piece, out);
  } else {
    byte_pair_encode_linear(ranks, piece, out);
  }
}

}  // namespace moeserve

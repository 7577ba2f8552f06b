// The linear byte-pair encoder for long pieces (bpe.h says why it is exact). For every prefix end it finds the
// prefix's last token among the tokens that end there (only lengths RankTable::lengths_ending_in names), checking
// each against the last token of the prefix before it; exactly one passes. A check runs the merge loop on the two
// tokens' bytes (at most twice the longest token) and is remembered. Runs of one character (spaces, a letter,
// newlines, '=', a CJK character) are the adversarial case: the longest stretch of the piece that repeats a unit
// of up to 4 bytes is found first, and inside it a token's bytes depend only on its phase in the unit and its
// length, so look-ups and checks there are array reads.
#include <bit>
#include <cstdint>
#include <string>
#include <unordered_map>

#include "tokenizer/bpe.h"
#include "util/error.h"

namespace moeserve {
namespace {

// Whether a alone (b = kNoRank), or a then b, is what the merge loop makes of their bytes.
class PairCheck {
 public:
  explicit PairCheck(const RankTable& ranks) : ranks_(ranks) {}
  bool operator()(TokenId a, TokenId b) {
    text_.assign(ranks_.token(a));
    if (b != RankTable::kNoRank) text_ += ranks_.token(b);
    ids_.clear();
    byte_pair_encode_merging(ranks_, text_, ids_);
    return b == RankTable::kNoRank ? ids_.size() == 1 && ids_[0] == a
                                   : ids_.size() == 2 && ids_[0] == a && ids_[1] == b;
  }

 private:
  const RankTable& ranks_;
  std::string text_;
  std::vector<TokenId> ids_;
};

// [begin, end) repeats its first `period` bytes (period 0: no such stretch).
struct Stretch {
  size_t begin = 0, end = 0, period = 0;
  bool holds(size_t from, size_t to) const { return period > 0 && from >= begin && to <= end; }
  // Where `at` falls in the unit (constant divisors: this is on the encoder's hot path).
  size_t phase(size_t at) const {
    const size_t offset = at - begin;
    switch (period) {
      case 1: return 0;
      case 2: return offset % 2;
      case 3: return offset % 3;
      default: return offset % 4;
    }
  }
};

// The longest stretch that repeats a unit of 1..kMaxPeriod bytes (one UTF-8 character at most), smaller units
// first on ties, if it has at least min_length bytes.
constexpr size_t kMaxPeriod = 4;
Stretch longest_periodic_stretch(std::string_view piece, size_t min_length) {
  Stretch best;
  for (size_t p = 1; p <= kMaxPeriod && p < piece.size() && best.end - best.begin < piece.size(); ++p) {
    size_t begin = 0;  // piece[i] == piece[i - p] for every i in [begin + p, i)
    for (size_t i = p; i <= piece.size(); ++i) {
      if (i < piece.size() && piece[i] == piece[i - p]) continue;
      if (i - begin > best.end - best.begin) best = {begin, i, p};
      begin = i + 1 - p;
    }
  }
  return best.end - best.begin >= min_length ? best : Stretch{};
}

// Token look-ups and pair checks for one piece: array reads inside its periodic stretch, else the rank table and
// checks remembered by token ids (bounded: forgotten past kMaxPairs).
class Lookups {
 public:
  Lookups(const RankTable& ranks, std::string_view piece)
      : ranks_(ranks),
        piece_(piece),
        stretch_(longest_periodic_stretch(piece, 2 * ranks.longest_token())),
        lengths_(std::min(ranks.longest_token(), piece.size()) + 1),
        check_(ranks) {
    if (stretch_.period == 0) return;
    ids_.assign(stretch_.period * lengths_, kUnknownId);
    pairs_.assign(stretch_.period * lengths_ * lengths_, kUnknown);
  }

  TokenId token(size_t start, size_t length) {
    if (!stretch_.holds(start, start + length)) return ranks_.find(piece_.substr(start, length));
    const size_t phase = stretch_.phase(start);
    TokenId& id = ids_[phase * lengths_ + length];
    if (id == kUnknownId) id = ranks_.find(piece_.substr(stretch_.begin + phase, length));
    return id;
  }

  // Token a at [start, start + length) followed by b of next_length bytes.
  bool valid(size_t start, size_t length, TokenId a, size_t next_length, TokenId b) {
    if (!stretch_.holds(start, start + length + next_length)) return remembered(a, b);
    const size_t phase = stretch_.phase(start);
    int8_t& known = pairs_[(phase * lengths_ + length) * lengths_ + next_length];
    if (known == kUnknown) known = check_(a, b) ? 1 : 0;
    return known == 1;
  }
  bool valid_alone(TokenId a) { return remembered(a, RankTable::kNoRank); }

 private:
  bool remembered(TokenId a, TokenId b) {
    const uint64_t key = static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32 | static_cast<uint32_t>(b);
    if (const auto known = known_.find(key); known != known_.end()) return known->second;
    const bool valid = check_(a, b);
    if (known_.size() >= kMaxPairs) known_.clear();
    known_.emplace(key, valid);
    return valid;
  }

  static constexpr size_t kMaxPairs = 1 << 16;
  static constexpr TokenId kUnknownId = -1;
  static constexpr int8_t kUnknown = -1;
  const RankTable& ranks_;
  std::string_view piece_;
  Stretch stretch_;
  size_t lengths_;  // token lengths 0..longest
  PairCheck check_;
  std::unordered_map<uint64_t, bool> known_;
  std::vector<TokenId> ids_;   // in the stretch: by phase and length
  std::vector<int8_t> pairs_;  // in the stretch: by the first token's phase and length, and the second's length
};

}  // namespace

void byte_pair_encode_linear(const RankTable& ranks, std::string_view piece, std::vector<TokenId>& out) {
  const size_t n = piece.size();
  Lookups lookups(ranks, piece);
  // The last token of the encoding of piece[0, end), by end (its length fits: RankTable checks it).
  std::vector<uint16_t> last_length(n + 1, 0);
  std::vector<TokenId> last_id(n + 1, RankTable::kNoRank);
  for (size_t end = 1; end <= n; ++end) {
    const size_t longest = std::min(ranks.longest_token(), end);
    auto is_last = [&](size_t length) {
      const size_t start = end - length;
      const TokenId id = lookups.token(start, length);
      if (id == RankTable::kNoRank) return false;
      const size_t before = last_length[start];
      if (start == 0 ? !lookups.valid_alone(id) : !lookups.valid(start - before, before, last_id[start], length, id))
        return false;
      last_length[end] = static_cast<uint16_t>(length);
      last_id[end] = id;
      return true;
    };
    // First the last token of the prefix one byte shorter, grown by that byte: in a run that is most often the
    // one (so a run costs a few look-ups per byte). Then lengths past the masks (tokenizers with longer tokens
    // than o200k's) one by one, then the masked ones, longest first; a single byte is always a token.
    const size_t grown = last_length[end - 1] + 1u;
    bool found = grown <= longest && is_last(grown);
    for (size_t length = longest; length > RankTable::kMaskedLengths && !found; --length)
      found = length != grown && is_last(length);
    if (end >= 2) {
      const RankTable::LengthMask& mask = ranks.lengths_ending_in(piece[end - 2], piece[end - 1]);
      for (size_t word = mask.size(); word-- > 0 && !found;) {
        for (uint64_t bits = mask[word]; bits != 0 && !found;) {
          const int bit = 63 - std::countl_zero(bits);
          bits &= ~(uint64_t{1} << bit);
          const size_t length = word * 64 + static_cast<size_t>(bit) + 1;
          found = length <= longest && length != grown && is_last(length);
        }
      }
    }
    if (!found && grown != 1) found = is_last(1);
    MOESERVE_CHECK(found, "byte-pair encoding: no valid last token for the first {} bytes of a {}-byte piece", end, n);
  }
  size_t count = 0;
  for (size_t end = n; end > 0; end -= last_length[end]) ++count;
  out.resize(out.size() + count);
  size_t at = out.size();
  for (size_t end = n; end > 0; end -= last_length[end]) out[--at] = last_id[end];
}

}  // namespace moeserve

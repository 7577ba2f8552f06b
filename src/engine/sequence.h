// A request inside the engine: its tokens, how many have KV in the cache, and its block tables per KV group.
#pragma once

#include <atomic>
#include <optional>
#include <cstdint>
#include <vector>

#include "engine/request.h"

namespace moeserve {

enum class SequenceStatus { waiting, running, finished };

struct Sequence {
  uint64_t id = 0;
  RequestSpec spec;
  EventCallback on_event;
  SequenceStatus status = SequenceStatus::waiting;

  std::vector<int32_t> tokens;  // prompt followed by the generated tokens
  int prompt_length = 0;
  int num_computed = 0;  // tokens[0, num_computed) have KV in the cache
  // block_tables[g][i]: block holding positions [i * block_size, (i + 1) * block_size) for KV group g; -1 where a
  // sliding-window group has given the block back.
  std::vector<std::vector<int32_t>> block_tables;
  std::vector<uint64_t> full_block_hashes;  // hashes of tokens' full blocks, computed as they fill
  int registered_blocks = 0;                // full blocks already offered to the prefix cache
  bool cancel_requested = false;

  // Logits processing: the tokens the penalties count; prompt logprobs gathered as the prefill computes them
  // (index p - 1 for prompt position p), sent with the first token.
  TokenHistory history;
  std::vector<TokenLogprobs> prompt_logprobs;
  // Constrained decoding: the matcher's state while the grammar applies (from its trigger on).
  std::optional<structured::MatcherState> grammar_state;

  // Speculative decoding: the draft shape (num_draft_tokens 0: this request does not speculate), the draft the
  // drafter proposed after the last step for the next one to verify (its root is tokens.back()), and how many
  // positions' target features the drafter has consumed.
  speculative::DraftShape speculation;
  speculative::DraftTree draft;
  int draft_fed = 0;

  RequestTiming timing;

  int num_generated() const { return static_cast<int>(tokens.size()) - prompt_length; }
  // Tokens whose KV still has to be computed before the next token can be sampled.
  int num_uncomputed() const { return static_cast<int>(tokens.size()) - num_computed; }
  bool speculates() const { return speculation.num_draft_tokens > 0; }
  // A prefix-cache hit may not reach past what the drafter holds (fed, or restored from its own prefix cache at
  // admission): the target computes no features for cached positions, and a drafter cannot skip positions.
  // Prompt logprobs need every prompt position computed, so such a sequence takes no hit before its first token.
  int max_prefix_hit() const {
    if (wants_prompt_logprobs()) return 0;
    return speculates() ? draft_fed : static_cast<int>(tokens.size());
  }
  bool wants_prompt_logprobs() const { return spec.prompt_logprobs && num_generated() == 0; }
  // The deadline the SLO-aware policy orders by.
  TimePoint deadline(double ttft_target_seconds) const;
};

}  // namespace moeserve

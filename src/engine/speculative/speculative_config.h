// Speculative decoding as users configure it: vLLM's --speculative-config JSON, with SGLang's names for the tree
// options. Parsed strictly: an unknown key, a wrong type or an out-of-range value is an error naming it.
//
//   {"method": "eagle3", "model": "DIR", "num_speculative_tokens": 3}            a chain of 3 draft tokens
//   {"method": "mtp", "num_speculative_tokens": 3}                               DeepSeek's MTP head drafts 3
//   {"method": "eagle3", "model": "DIR", "num_speculative_tokens": 5,
//    "speculative_eagle_topk": 4, "speculative_num_draft_tokens": 8}              a tree (EAGLE-2/3 dynamic tree)
//
// Keys:
//   method                        "eagle3" (an EAGLE-3 draft head); "mtp" (a DeepSeek-V3/R1 model's own MTP layer;
//                                 vLLM's "deepseek_mtp" and SGLang's "eagle" on such a model mean the same, and are
//                                 read as "mtp" there); or "test_random" (random drafts, for measuring the engine's
//                                 cost without a draft head)
//   model                         the draft head's directory (eagle3; not with mtp, whose head is the target's own
//                                 layer), or "synthetic": random weights of
//                                 gpt-oss-120b's head shape made on the GPU, for benchmarks (CUDA runner only;
//                                 also with --synthetic targets, which have no checkpoint)
//   num_speculative_tokens        k >= 1: draft depth (vLLM's name; SGLang's --speculative-num-steps)
//   speculative_eagle_topk        branching of the draft tree (SGLang's name); 1 (default) drafts a chain
//   speculative_num_draft_tokens  tokens verified per step including the root (SGLang's meaning); for a chain it
//                                 is k + 1 and may be left out; for a tree it defaults to k * topk + 1
//   test_acceptance_rate          TEST SWITCH, NOT LOSSLESS: verification ignores the target's distribution and
//                                 accepts each draft position with this probability (and, after a rejection or a
//                                 full accept, emits the target's own sample). It sets the acceptance rate of the
//                                 H200 cost model (docs/PERF.md); outputs are then not the target model's.
#pragma once

#include <optional>
#include <string>

#include "runner/drafter.h"

namespace moeserve::speculative {

struct SpeculativeConfig {
  std::string method;  // empty: speculation off
  std::string model;
  int num_speculative_tokens = 0;
  int eagle_topk = 1;
  int num_draft_tokens = 0;  // including the root
  std::optional<double> test_acceptance_rate;

  bool enabled() const { return !method.empty(); }
  // The draft every speculating request asks for.
  DraftShape shape() const;
};

// Parses --speculative-config; an empty string gives a disabled config.
SpeculativeConfig parse_speculative_config(const std::string& json);

// Fails naming the field when a request's draft shape is impossible.
void validate_draft_shape(const DraftShape& shape);

}  // namespace moeserve::speculative

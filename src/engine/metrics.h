// Engine metrics: a snapshot the server's /metrics and the benchmark both read. Histograms use fixed bucket
// bounds (seconds) and export cumulative counts as Prometheus does.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "engine/request.h"

namespace moeserve {

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double value);

  const std::vector<double>& upper_bounds() const { return bounds_; }
  const std::vector<uint64_t>& counts() const { return counts_; }  // per bucket, the last is +Inf
  uint64_t count() const { return count_; }
  double sum() const { return sum_; }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;
  uint64_t count_ = 0;
  double sum_ = 0;
};

// Bucket bounds for latencies from a millisecond to a few minutes.
std::vector<double> latency_buckets_seconds();
// Bucket bounds for token counts: 1, 2, 5, 10, 20, 50, ... up to the first at or above `max` (vLLM's for its
// request_prompt_tokens and request_generation_tokens, with max its max_model_len).
std::vector<double> token_count_buckets(int64_t max);

struct EngineMetrics {
  // Fixed at start.
  int block_size = 0;
  bool prefix_caching = false;
  // Now.
  size_t running = 0;
  size_t waiting = 0;
  int64_t kv_blocks_total = 0;
  int64_t kv_blocks_in_use = 0;
  double kv_usage() const { return kv_blocks_total ? static_cast<double>(kv_blocks_in_use) / kv_blocks_total : 0.0; }
  // Since start.
  uint64_t steps = 0;
  uint64_t prompt_tokens_computed = 0;
  uint64_t generated_tokens = 0;
  uint64_t prefix_queried_tokens = 0;
  uint64_t prefix_hit_tokens = 0;
  double prefix_hit_rate() const {
    return prefix_queried_tokens ? static_cast<double>(prefix_hit_tokens) / prefix_queried_tokens : 0.0;
  }
  uint64_t preemptions = 0;
  std::map<FinishReason, uint64_t> finished;
  double busy_seconds = 0;  // time spent in steps
  // Speculative decoding, as vLLM's spec_decode counters: verify steps that carried a draft, draft tokens
  // proposed, draft tokens accepted, and accepted tokens by draft position (depth 1 first).
  uint64_t spec_drafts = 0;
  uint64_t spec_draft_tokens = 0;
  uint64_t spec_accepted_tokens = 0;
  std::vector<uint64_t> spec_accepted_per_position;
  // vLLM's mean acceptance length: tokens emitted per verify step, 1 + accepted / drafts (the bonus or correction
  // token counts). 0 before any verify step.
  double spec_acceptance_length() const {
    return spec_drafts ? 1.0 + static_cast<double>(spec_accepted_tokens) / spec_drafts : 0.0;
  }
  // Fraction of verify steps that accepted a draft token at depth position + 1.
  std::vector<double> spec_acceptance_rates() const;
  // Last step.
  int last_step_tokens = 0;
  double last_step_seconds = 0;

  Histogram ttft{latency_buckets_seconds()};
  Histogram tpot{latency_buckets_seconds()};
  Histogram inter_token_latency{latency_buckets_seconds()};  // between a request's successive token emissions
  Histogram queue_time{latency_buckets_seconds()};
  Histogram prefill_time{latency_buckets_seconds()};  // first scheduled to first token
  Histogram decode_time{latency_buckets_seconds()};   // first token to last token
  Histogram inference_time{latency_buckets_seconds()};  // first scheduled to last token
  Histogram e2e_latency{latency_buckets_seconds()};
  // Per finished request; bounds set by the engine from its longest sequence.
  Histogram request_prompt_tokens{token_count_buckets(1)};
  Histogram request_generation_tokens{token_count_buckets(1)};
  Histogram step_time{latency_buckets_seconds()};
  Histogram tokens_per_step{{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384}};
};

}  // namespace moeserve

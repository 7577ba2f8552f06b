// Helpers shared by the bench tests: a small run's config and an Error's message.
#pragma once

#include <functional>
#include <string>

#include "bench/driver.h"
#include "error_checks.h"
#include "test_util.h"
#include "util/error.h"

namespace moeserve::bench::testing {

// A short run with token latencies and equal issue over `samples` samples: 40 queries/s (Server) for at least
// 0.3 s, the GPT-OSS Server bounds, fixed seeds, greedy, at most `max_tokens` new tokens; logs go to a fresh
// temporary directory.
inline BenchConfig small_run(Scenario scenario, TestMode mode, uint64_t samples, int max_tokens,
                             const std::string& label) {
  TestSettings s;
  s.scenario = scenario;
  s.mode = mode;
  s.server_target_qps = 40;
  s.offline_expected_qps = 40;
  s.single_stream_expected_latency_ns = 50'000'000;
  s.min_duration_ms = 300;
  s.min_query_count = samples;
  s.sample_concatenate_permutation = true;
  s.use_token_latencies = true;
  s.server_ttft_latency = 3'000'000'000;
  s.server_tpot_latency = 80'000'000;
  s.qsl_rng_seed = 1;
  s.sample_index_rng_seed = 2;
  s.schedule_rng_seed = 3;
  BenchConfig c;
  c.settings = effective_settings(s, samples, samples);
  c.max_output_tokens = max_tokens;
  c.sampling.temperature = 0;
  c.output_dir = moeserve::testing::temp_dir(label);
  c.loadgen_version = "test";
  return c;
}

using moeserve::testing::error_of;

}  // namespace moeserve::bench::testing

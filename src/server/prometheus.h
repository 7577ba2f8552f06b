// The /metrics page in Prometheus' text format, in two families of the same numbers:
// - vLLM's (`vllm:*{model_name="..."}`, as docs.vllm.ai's "Production Metrics" names them), so that dashboards
//   and alerts made for vLLM work unchanged: scheduler gauges, KV usage, token and prefix-cache counters, request
//   histograms (prompt and generation tokens, TTFT, inter-token latency, TPOT, end-to-end, queue, prefill, decode
//   and inference time), tokens per step, the cache config, and speculative decoding's counters;
// - moeserve's own (`moeserve_*`), with HTTP request counts by route and status besides.
// Everything is a counter, gauge or histogram since start: rates are the scraper's to take (rate()), so two
// scrapers never skew each other.
#pragma once

#include <map>
#include <string>
#include <utility>

#include "engine/metrics.h"

namespace moeserve::server {

struct HttpCounts {
  std::map<std::pair<std::string, unsigned>, uint64_t> by_route_status;  // route as route_label() gives it
};

std::string render_prometheus(const EngineMetrics& engine, const HttpCounts& http, const std::string& model_name);

}  // namespace moeserve::server

// The /metrics page in Prometheus' text format: HTTP request counts by route and status, the engine's gauges
// (running, waiting, KV usage), counters (tokens, prefix-cache queries and hits, preemptions), throughput, and
// latency histograms (TTFT, TPOT, end-to-end, queue time). Names follow vLLM's where one exists.
#pragma once

#include <map>
#include <string>
#include <utility>

#include "engine/metrics.h"

namespace moeserve::server {

struct HttpCounts {
  std::map<std::pair<std::string, unsigned>, uint64_t> by_route_status;
};

std::string render_prometheus(const EngineMetrics& engine, const HttpCounts& http, double generation_tokens_per_second);

}  // namespace moeserve::server

#include "server/prometheus.h"

#include <fmt/format.h>

namespace moeserve::server {
namespace {

void header(std::string& out, const char* name, const char* type, const char* help) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

void scalar(std::string& out, const char* name, const char* type, const char* help, double value) {
  header(out, name, type, help);
  out += fmt::format("{} {}\n", name, value);
}

void histogram(std::string& out, const char* name, const char* help, const Histogram& h) {
  header(out, name, "histogram", help);
  uint64_t cumulative = 0;
  for (size_t i = 0; i < h.upper_bounds().size(); ++i) {
    cumulative += h.counts()[i];
    out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, h.upper_bounds()[i], cumulative);
  }
  out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n{}_sum {}\n{}_count {}\n", name, h.count(), name, h.sum(), name,
                     h.count());
}

}  // namespace

std::string render_prometheus(const EngineMetrics& m, const HttpCounts& http, double tokens_per_second) {
  std::string out;
  header(out, "moeserve_http_requests_total", "counter", "HTTP requests by route and response status.");
  for (const auto& [key, count] : http.by_route_status)
    out += fmt::format("moeserve_http_requests_total{{route=\"{}\",status=\"{}\"}} {}\n", key.first, key.second, count);
  scalar(out, "moeserve_num_requests_running", "gauge", "Requests being computed.", static_cast<double>(m.running));
  scalar(out, "moeserve_num_requests_waiting", "gauge", "Requests waiting to be scheduled.", static_cast<double>(m.waiting));
  scalar(out, "moeserve_kv_cache_usage_ratio", "gauge", "Fraction of KV cache blocks in use.", m.kv_usage());
  scalar(out, "moeserve_kv_cache_blocks", "gauge", "KV cache blocks in the pool.", static_cast<double>(m.kv_blocks_total));
  scalar(out, "moeserve_prefix_cache_queries_total", "counter", "Prompt tokens looked up in the prefix cache.",
         static_cast<double>(m.prefix_queried_tokens));
  scalar(out, "moeserve_prefix_cache_hits_total", "counter", "Prompt tokens served from the prefix cache.",
         static_cast<double>(m.prefix_hit_tokens));
  scalar(out, "moeserve_prompt_tokens_total", "counter", "Prompt tokens computed.",
         static_cast<double>(m.prompt_tokens_computed));
  scalar(out, "moeserve_generation_tokens_total", "counter", "Tokens generated.", static_cast<double>(m.generated_tokens));
  scalar(out, "moeserve_generation_tokens_per_second", "gauge", "Tokens generated per second since the last scrape.",
         tokens_per_second);
  scalar(out, "moeserve_num_preemptions_total", "counter", "Requests preempted (recomputed later).",
         static_cast<double>(m.preemptions));
  // Speculative decoding, named as vLLM's spec_decode counters (acceptance length = 1 + accepted / drafts).
  scalar(out, "moeserve_spec_decode_num_drafts_total", "counter", "Verify steps that carried a draft.",
         static_cast<double>(m.spec_drafts));
  scalar(out, "moeserve_spec_decode_num_draft_tokens_total", "counter", "Draft tokens proposed and verified.",
         static_cast<double>(m.spec_draft_tokens));
  scalar(out, "moeserve_spec_decode_num_accepted_tokens_total", "counter", "Draft tokens accepted.",
         static_cast<double>(m.spec_accepted_tokens));
  header(out, "moeserve_spec_decode_num_accepted_tokens_per_pos_total", "counter",
         "Draft tokens accepted by draft position (0: depth 1).");
  for (size_t i = 0; i < m.spec_accepted_per_position.size(); ++i)
    out += fmt::format("moeserve_spec_decode_num_accepted_tokens_per_pos_total{{position=\"{}\"}} {}\n", i,
                       m.spec_accepted_per_position[i]);
  scalar(out, "moeserve_spec_decode_mean_acceptance_length", "gauge",
         "Tokens emitted per verify step since start (1 + accepted / drafts; 0 before any).",
         m.spec_acceptance_length());
  header(out, "moeserve_request_success_total", "counter", "Finished requests by finish reason.");
  for (const auto& [reason, count] : m.finished)
    out += fmt::format("moeserve_request_success_total{{finished_reason=\"{}\"}} {}\n", finish_reason_name(reason), count);
  histogram(out, "moeserve_time_to_first_token_seconds", "Time to first token.", m.ttft);
  histogram(out, "moeserve_time_per_output_token_seconds", "Time per output token after the first.", m.tpot);
  histogram(out, "moeserve_e2e_request_latency_seconds", "Request latency, arrival to last token.", m.e2e_latency);
  histogram(out, "moeserve_request_queue_time_seconds", "Time from arrival to first scheduling.", m.queue_time);
  histogram(out, "moeserve_step_time_seconds", "Engine step time.", m.step_time);
  return out;
}

}  // namespace moeserve::server

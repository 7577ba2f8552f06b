#include "server/prometheus.h"

#include <fmt/format.h>

namespace moeserve::server {
namespace {

// One family of series: a name prefix and the labels every series carries.
class Family {
 public:
  Family(std::string& out, std::string prefix, std::string labels)
      : out_(out), prefix_(std::move(prefix)), labels_(std::move(labels)) {}

  void scalar(const char* name, const char* type, const char* help, double value, const std::string& extra = {}) {
    header(name, type, help);
    sample(name, extra, value);
  }
  void header(const char* name, const char* type, const char* help) {
    out_ += fmt::format("# HELP {0}{1} {2}\n# TYPE {0}{1} {3}\n", prefix_, name, help, type);
  }
  // One series of a family whose header was written; `extra` are labels besides the family's.
  void sample(const std::string& name, const std::string& extra, double value) {
    std::string labels = labels_;
    if (!extra.empty()) labels += (labels.empty() ? "" : ",") + extra;
    out_ += fmt::format("{}{}{} {}\n", prefix_, name, labels.empty() ? "" : "{" + labels + "}", value);
  }
  void histogram(const char* name, const char* help, const Histogram& h) {
    header(name, "histogram", help);
    uint64_t cumulative = 0;
    for (size_t i = 0; i < h.upper_bounds().size(); ++i) {
      cumulative += h.counts()[i];
      sample(std::string(name) + "_bucket", fmt::format("le=\"{}\"", h.upper_bounds()[i]),
             static_cast<double>(cumulative));
    }
    sample(std::string(name) + "_bucket", "le=\"+Inf\"", static_cast<double>(h.count()));
    sample(std::string(name) + "_sum", {}, h.sum());
    sample(std::string(name) + "_count", {}, static_cast<double>(h.count()));
  }

 private:
  std::string& out_;
  std::string prefix_;
  std::string labels_;
};

// Prometheus' text format escapes backslash, double quote and newline in label values.
std::string label_value(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '\\' || c == '"') out += '\\';
    out += c == '\n' ? std::string("\\n") : std::string(1, c);
  }
  return out;
}

// vLLM's finished_reason values: stop, length, abort (a cancelled or failed request).
const char* vllm_finish_reason(FinishReason reason) {
  return reason == FinishReason::stop ? "stop" : reason == FinishReason::length ? "length" : "abort";
}

void render_vllm(std::string& out, const EngineMetrics& m, const std::string& model_name) {
  Family f(out, "vllm:", fmt::format("model_name=\"{}\"", label_value(model_name)));
  f.scalar("num_requests_running", "gauge", "Number of requests in model execution batches.",
           static_cast<double>(m.running));
  f.scalar("num_requests_waiting", "gauge", "Number of requests waiting to be processed.",
           static_cast<double>(m.waiting));
  f.scalar("kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.", m.kv_usage());
  f.scalar("prefix_cache_queries_total", "counter", "Prefix cache queries, in terms of number of queried tokens.",
           static_cast<double>(m.prefix_queried_tokens));
  f.scalar("prefix_cache_hits_total", "counter", "Prefix cache hits, in terms of number of cached tokens.",
           static_cast<double>(m.prefix_hit_tokens));
  f.scalar("num_preemptions_total", "counter", "Cumulative number of preemptions from the engine.",
           static_cast<double>(m.preemptions));
  f.scalar("prompt_tokens_total", "counter", "Number of prefill tokens processed.",
           static_cast<double>(m.prompt_tokens_computed));
  f.scalar("generation_tokens_total", "counter", "Number of generation tokens processed.",
           static_cast<double>(m.generated_tokens));
  f.header("request_success_total", "counter", "Count of successfully processed requests.");
  std::map<std::string, uint64_t> by_reason = {{"stop", 0}, {"length", 0}, {"abort", 0}};
  for (const auto& [reason, count] : m.finished) by_reason[vllm_finish_reason(reason)] += count;
  for (const auto& [reason, count] : by_reason)
    f.sample("request_success_total", fmt::format("finished_reason=\"{}\"", reason), static_cast<double>(count));
  f.histogram("request_prompt_tokens", "Number of prefill tokens processed.", m.request_prompt_tokens);
  f.histogram("request_generation_tokens", "Number of generation tokens processed.", m.request_generation_tokens);
  f.histogram("iteration_tokens_total", "Histogram of number of tokens per engine_step.", m.tokens_per_step);
  f.histogram("time_to_first_token_seconds", "Histogram of time to first token in seconds.", m.ttft);
  f.histogram("inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", m.inter_token_latency);
  // The name vLLM used for inter-token latency before it was renamed; still read by older dashboards.
  f.histogram("time_per_output_token_seconds",
              "Histogram of time per output token in seconds (deprecated name of "
              "inter_token_latency_seconds).",
              m.inter_token_latency);
  f.histogram("request_time_per_output_token_seconds", "Histogram of time_per_output_token_seconds per request.",
              m.tpot);
  f.histogram("e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", m.e2e_latency);
  f.histogram("request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", m.queue_time);
  f.histogram("request_inference_time_seconds", "Histogram of time spent in RUNNING phase for request.",
              m.inference_time);
  f.histogram("request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.", m.prefill_time);
  f.histogram("request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.", m.decode_time);
  f.scalar("cache_config_info", "gauge", "Information of the LLMEngine CacheConfig.", 1,
           fmt::format("block_size=\"{}\",enable_prefix_caching=\"{}\",num_gpu_blocks=\"{}\"", m.block_size,
                       m.prefix_caching ? "True" : "False", m.kv_blocks_total));
  f.scalar("spec_decode_num_drafts_total", "counter", "Number of spec decoding drafts.",
           static_cast<double>(m.spec_drafts));
  f.scalar("spec_decode_num_draft_tokens_total", "counter", "Number of draft tokens.",
           static_cast<double>(m.spec_draft_tokens));
  f.scalar("spec_decode_num_accepted_tokens_total", "counter", "Number of accepted tokens.",
           static_cast<double>(m.spec_accepted_tokens));
  f.header("spec_decode_num_accepted_tokens_per_pos_total", "counter", "Accepted tokens per draft position.");
  for (size_t i = 0; i < m.spec_accepted_per_position.size(); ++i)
    f.sample("spec_decode_num_accepted_tokens_per_pos_total", fmt::format("position=\"{}\"", i),
             static_cast<double>(m.spec_accepted_per_position[i]));
}

void render_moeserve(std::string& out, const EngineMetrics& m, const HttpCounts& http) {
  Family f(out, "moeserve_", "");
  f.header("http_requests_total", "counter", "HTTP requests by route and response status.");
  for (const auto& [key, count] : http.by_route_status)
    f.sample("http_requests_total", fmt::format("route=\"{}\",status=\"{}\"", label_value(key.first), key.second),
             static_cast<double>(count));
  f.scalar("num_requests_running", "gauge", "Requests being computed.", static_cast<double>(m.running));
  f.scalar("num_requests_waiting", "gauge", "Requests waiting to be scheduled.", static_cast<double>(m.waiting));
  f.scalar("kv_cache_usage_ratio", "gauge", "Fraction of KV cache blocks in use.", m.kv_usage());
  f.scalar("kv_cache_blocks", "gauge", "KV cache blocks in the pool.", static_cast<double>(m.kv_blocks_total));
  f.scalar("prefix_cache_queries_total", "counter", "Prompt tokens looked up in the prefix cache.",
           static_cast<double>(m.prefix_queried_tokens));
  f.scalar("prefix_cache_hits_total", "counter", "Prompt tokens served from the prefix cache.",
           static_cast<double>(m.prefix_hit_tokens));
  f.scalar("prompt_tokens_total", "counter", "Prompt tokens computed.", static_cast<double>(m.prompt_tokens_computed));
  f.scalar("generation_tokens_total", "counter", "Tokens generated.", static_cast<double>(m.generated_tokens));
  f.scalar("num_preemptions_total", "counter", "Requests preempted (recomputed later).",
           static_cast<double>(m.preemptions));
  // Speculative decoding, named as vLLM's spec_decode counters (acceptance length = 1 + accepted / drafts).
  f.scalar("spec_decode_num_drafts_total", "counter", "Verify steps that carried a draft.",
           static_cast<double>(m.spec_drafts));
  f.scalar("spec_decode_num_draft_tokens_total", "counter", "Draft tokens proposed and verified.",
           static_cast<double>(m.spec_draft_tokens));
  f.scalar("spec_decode_num_accepted_tokens_total", "counter", "Draft tokens accepted.",
           static_cast<double>(m.spec_accepted_tokens));
  f.header("spec_decode_num_accepted_tokens_per_pos_total", "counter",
           "Draft tokens accepted by draft position (0: depth 1).");
  for (size_t i = 0; i < m.spec_accepted_per_position.size(); ++i)
    f.sample("spec_decode_num_accepted_tokens_per_pos_total", fmt::format("position=\"{}\"", i),
             static_cast<double>(m.spec_accepted_per_position[i]));
  f.scalar("spec_decode_mean_acceptance_length", "gauge",
           "Tokens emitted per verify step since start (1 + accepted / drafts; 0 before any).",
           m.spec_acceptance_length());
  f.header("request_success_total", "counter", "Finished requests by finish reason.");
  for (const auto& [reason, count] : m.finished)
    f.sample("request_success_total", fmt::format("finished_reason=\"{}\"", finish_reason_name(reason)),
             static_cast<double>(count));
  f.histogram("time_to_first_token_seconds", "Time to first token.", m.ttft);
  f.histogram("time_per_output_token_seconds", "Time per output token after the first.", m.tpot);
  f.histogram("e2e_request_latency_seconds", "Request latency, arrival to last token.", m.e2e_latency);
  f.histogram("request_queue_time_seconds", "Time from arrival to first scheduling.", m.queue_time);
  f.histogram("step_time_seconds", "Engine step time.", m.step_time);
}

}  // namespace

std::string render_prometheus(const EngineMetrics& m, const HttpCounts& http, const std::string& model_name) {
  std::string out;
  render_vllm(out, m, model_name);
  render_moeserve(out, m, http);
  return out;
}

}  // namespace moeserve::server

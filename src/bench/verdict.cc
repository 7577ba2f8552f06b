#include "bench/verdict.h"

#include <fmt/format.h>

namespace moeserve::bench {
namespace {

std::string seconds(double s) { return fmt::format("{:.3f} s", s); }
std::string ms(int64_t ns) { return fmt::format("{:.3f} ms", static_cast<double>(ns) / 1e6); }

void judge_min_duration(const PerformanceSummary& s, const EffectiveSettings& settings, Verdict& v) {
  // What each scenario measures its duration by, and LoadGen's recommendation when it falls short.
  struct Rule {
    double measured;
    const char* measured_as;
    const char* recommendation;
  };
  const PerformanceResult& r = s.result;
  const Rule rule = settings.scenario == Scenario::offline
                        ? Rule{r.max_latency, "the run took {} (its longest latency)",
                               "Increase expected QPS so the loadgen pre-generates a larger (coalesced) query."}
                    : settings.scenario == Scenario::server
                        ? Rule{r.final_query_scheduled_time, "the last query was scheduled at {}",
                               "Increase the target QPS so the loadgen pre-generates more queries."}
                        : Rule{r.final_query_issued_time, "the last query was issued at {}",
                               "Decrease the expected latency so the loadgen pre-generates more queries."};
  const double min_duration = static_cast<double>(settings.min_duration_ms) / 1000.0;
  v.duration_s = rule.measured;
  v.min_duration_met = rule.measured >= min_duration;
  if (v.min_duration_met) return;
  v.min_duration_recommendation = rule.recommendation;
  v.reasons.push_back(fmt::format("min duration not met: {}, under {}",
                                  fmt::format(fmt::runtime(rule.measured_as), seconds(rule.measured)),
                                  seconds(min_duration)));
}

void judge_perf_constraints(const PerformanceSummary& s, const EffectiveSettings& settings, Verdict& v) {
  v.has_perf_constraints = settings.scenario == Scenario::server;
  if (!v.has_perf_constraints) return;
  const std::string pct = fmt::format("p{:g}", settings.target_latency_percentile * 100);
  if (!settings.requested.use_token_latencies) {
    if (s.latency.at_target > settings.target_latency_ns) {
      v.perf_constraints_met = false;
      v.perf_constraints_recommendation = "Reduce target QPS to improve latency.";
      v.reasons.push_back(fmt::format("{} latency {} is over the {} bound", pct, ms(s.latency.at_target),
                                      ms(settings.target_latency_ns)));
    }
    return;
  }
  const auto ttft_bound = static_cast<int64_t>(settings.requested.server_ttft_latency);
  const auto tpot_bound = static_cast<int64_t>(settings.requested.server_tpot_latency);
  if (s.first_token.at_target > ttft_bound) {
    v.perf_constraints_met = false;
    v.perf_constraints_recommendation = "TTFT constrain not met: Reduce target QPS to improve latency.";
    v.reasons.push_back(
        fmt::format("{} TTFT {} is over the {} bound", pct, ms(s.first_token.at_target), ms(ttft_bound)));
  }
  if (s.tpot.at_target > tpot_bound) {
    const char* text = "TPOT constrain not met: Reduce target QPS to improve latency.";
    if (v.perf_constraints_recommendation.empty()) {
      v.perf_constraints_recommendation = text;
    } else {
      v.perf_constraints_recommendation += std::string("\n * ") + text;
    }
    v.perf_constraints_met = false;
    v.reasons.push_back(fmt::format("{} TPOT {} is over the {} bound", pct, ms(s.tpot.at_target), ms(tpot_bound)));
  }
}

void judge_early_stopping(const PerformanceSummary& s, const EffectiveSettings& settings, Verdict& v) {
  const auto issued = static_cast<int64_t>(s.result.queries_issued);
  const double p = settings.target_latency_percentile;
  if (!settings.requested.use_token_latencies) {
    v.early_stopping =
        early_stopping(settings.scenario, issued, s.result.sample_latencies, settings.target_latency_ns, p);
    v.early_stopping_met = v.early_stopping.met;
    if (!v.early_stopping_met)
      v.reasons.push_back("early stopping not met: " + one_line(v.early_stopping.recommendation));
    return;
  }
  v.early_stopping_tpot = early_stopping(settings.scenario, issued, s.result.time_per_output_token,
                                         static_cast<int64_t>(settings.requested.server_tpot_latency), p);
  if (v.early_stopping_tpot.met) {
    v.early_stopping_ttft = early_stopping(settings.scenario, issued, s.result.first_token_latencies,
                                           static_cast<int64_t>(settings.requested.server_ttft_latency), p);
  }
  v.early_stopping_met = v.early_stopping_tpot.met && v.early_stopping_ttft.met;
  if (!v.early_stopping_tpot.met)
    v.reasons.push_back("TPOT early stopping not met: " + one_line(v.early_stopping_tpot.recommendation));
  if (!v.early_stopping_ttft.met)
    v.reasons.push_back("TTFT early stopping not met: " + one_line(v.early_stopping_ttft.recommendation));
}

}  // namespace

Verdict judge(const PerformanceSummary& s, const EffectiveSettings& settings) {
  Verdict v;
  judge_min_duration(s, settings, v);
  v.min_queries_met =
      s.result.queries_issued >= settings.min_query_count && s.sample_count >= settings.min_sample_count;
  if (!v.min_queries_met)
    v.reasons.push_back(fmt::format("min queries not met: {} queries ({} samples) issued, {} ({}) required",
                                    s.result.queries_issued, s.sample_count, settings.min_query_count,
                                    settings.min_sample_count));
  judge_early_stopping(s, settings, v);
  judge_perf_constraints(s, settings, v);
  v.samples_failed = s.result.failed_samples;
  if (v.samples_failed > 0) v.reasons.push_back(failed_samples_text(v.samples_failed, s.sample_count));
  v.valid = v.min_duration_met && v.min_queries_met && v.perf_constraints_met && v.early_stopping_met &&
            v.samples_failed == 0;
  return v;
}

std::string one_line(const std::string& text) {
  std::string out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    const size_t first = line.find_first_not_of(" *");
    if (first != std::string::npos) out += (out.empty() ? "" : " ") + line.substr(first);
    start = end + 1;
  }
  return out;
}

std::string failed_samples_text(uint64_t failed, uint64_t total) {
  return fmt::format("{} of {} samples failed", failed, total);
}

}  // namespace moeserve::bench

#include "bench/find_peak.h"

#include <fmt/format.h>

#include <algorithm>

namespace moeserve::bench {

FindPeakResult find_peak(const ProbeFn& run, const FindPeakOptions& o) {
  FindPeakResult r;
  std::optional<double> passing, failing;  // the highest qps that passed, the lowest that failed
  int probes = 0;
  // Runs a probe and narrows the bracket; nullopt when the run was interrupted.
  auto probe = [&](double qps, const char* kind) -> std::optional<bool> {
    ProbeResult p = run(qps, false);
    p.kind = kind;
    p.target_qps = qps;
    r.probes.push_back(p);
    ++probes;
    if (p.stopped) return std::nullopt;
    if (p.valid) {
      passing = std::max(passing.value_or(qps), qps);
    } else {
      failing = std::min(failing.value_or(qps), qps);
    }
    return p.valid;
  };
  auto stopped = [&] {
    r.outcome = "interrupted";
    r.lowest_failing_qps = failing;
    return r;
  };

  const double factor = 1 + o.step;
  double qps = o.start_qps;
  while (!(passing && failing) && probes < o.max_probes) {
    const std::optional<bool> valid = probe(qps, "bracket");
    if (!valid) return stopped();
    qps = *valid ? qps * factor : qps / factor;
  }
  while (passing && failing && *failing - *passing > o.tolerance_qps && probes < o.max_probes) {
    if (!probe((*passing + *failing) / 2, "bisect")) return stopped();
  }
  r.lowest_failing_qps = failing;
  if (!passing) {
    r.outcome = fmt::format("no probe was VALID, down to {:.4g} qps", r.probes.back().target_qps);
    return r;
  }

  double candidate = *passing;
  for (int attempt = 0; attempt < o.max_confirms; ++attempt) {
    ProbeResult p = run(candidate, true);
    p.kind = "confirm";
    p.target_qps = candidate;
    r.probes.push_back(p);
    if (p.stopped) return stopped();
    if (p.valid) {
      r.peak_qps = candidate;
      r.outcome = failing ? fmt::format("highest VALID qps {:.4g} (confirmed at full settings; {:.4g} qps was INVALID)",
                                        candidate, *r.lowest_failing_qps)
                          : fmt::format(
                                "highest VALID qps {:.4g} (confirmed; no probe failed within {} probes: the peak may "
                                "be higher)",
                                candidate, o.max_probes);
      return r;
    }
    r.lowest_failing_qps = std::min(r.lowest_failing_qps.value_or(candidate), candidate);
    candidate *=
        p.over_bound > 1 ? std::clamp(1 / p.over_bound, kConfirmBackoffMost, kConfirmBackoff) : kConfirmBackoff;
  }
  r.outcome = fmt::format("no confirming run was VALID ({} tried, down to {:.4g} qps)", o.max_confirms,
                          r.probes.back().target_qps);
  return r;
}

BenchConfig probe_config(const BenchConfig& full, double qps, double probe_seconds, uint64_t qsl_count) {
  TestSettings s = full.settings.requested;
  s.server_target_qps = qps;
  s.min_duration_ms = static_cast<uint64_t>(probe_seconds * 1000);
  s.min_query_count = 1;
  // Equal issue would pad a probe to the whole sample set (6,396 queries for GPT-OSS's).
  s.sample_concatenate_permutation = false;
  BenchConfig c = full;
  c.settings = effective_settings(s, qsl_count, qsl_count);
  c.abort_when_invalid = true;
  return c;
}

BenchConfig confirm_config(const BenchConfig& full, double qps, uint64_t qsl_count) {
  TestSettings s = full.settings.requested;
  s.server_target_qps = qps;
  BenchConfig c = full;
  c.settings = effective_settings(s, qsl_count, qsl_count);
  return c;
}

ProbeResult probe_result(const RunResult& run, bool confirm) {
  ProbeResult p;
  p.target_qps = run.settings.target_qps;
  p.seconds = run.wall_seconds;
  p.stopped = run.interrupted;
  if (run.summary) {
    p.p99_ttft_s = static_cast<double>(run.summary->first_token.at_target) / 1e9;
    p.p99_tpot_ms = static_cast<double>(run.summary->tpot.at_target) / 1e6;
    p.tokens_per_second = run.summary->completed_tokens_per_second();
    const EffectiveSettings& e = run.settings;
    if (e.requested.use_token_latencies)
      p.over_bound = std::max(p.p99_ttft_s * 1e9 / static_cast<double>(e.requested.server_ttft_latency),
                              p.p99_tpot_ms * 1e6 / static_cast<double>(e.requested.server_tpot_latency));
  }
  if (confirm) {
    p.valid = run_valid(run);
    p.reasons = invalid_reasons(run);
    if (!run.aborted.empty()) p.reasons.push_back("stopped early: " + run.aborted);
    return p;
  }
  const EffectiveSettings& e = run.settings;
  // A probe stopped early cancels what is in flight: those samples fail, but the reason is the stop's.
  if (!run.aborted.empty()) {
    p.reasons.push_back("stopped early: " + run.aborted);
  } else if (run.failed_samples > 0) {
    p.reasons.push_back(failed_samples_text(run.failed_samples, run.samples.size()));
  }
  if (run.summary) {
    const std::string pct = fmt::format("p{:g}", e.target_latency_percentile * 100);
    const double ttft_bound = static_cast<double>(e.requested.server_ttft_latency) / 1e9;
    const double tpot_bound = static_cast<double>(e.requested.server_tpot_latency) / 1e6;
    if (p.p99_ttft_s > ttft_bound)
      p.reasons.push_back(fmt::format("{} TTFT {:.3f} s is over the {:g} s bound", pct, p.p99_ttft_s, ttft_bound));
    if (p.p99_tpot_ms > tpot_bound)
      p.reasons.push_back(fmt::format("{} TPOT {:.2f} ms is over the {:g} ms bound", pct, p.p99_tpot_ms, tpot_bound));
  } else {
    p.reasons.push_back("no performance summary");
  }
  p.valid = p.reasons.empty() && !run.interrupted;
  return p;
}

nlohmann::json find_peak_json(const FindPeakResult& result, const FindPeakOptions& o) {
  nlohmann::json probes = nlohmann::json::array();
  for (const ProbeResult& p : result.probes)
    probes.push_back({{"kind", p.kind},
                      {"target_qps", p.target_qps},
                      {"valid", p.valid},
                      {"p99_ttft_s", p.p99_ttft_s},
                      {"p99_tpot_ms", p.p99_tpot_ms},
                      {"tokens_per_second", p.tokens_per_second},
                      {"seconds", p.seconds},
                      {"reasons", p.reasons}});
  nlohmann::json j = {
      {"method",
       fmt::format("bracketing from {:g} qps by factors of {:g}, then bisection to within {:g} qps, on short probes "
                   "judged on the p99 bounds and failed samples (stopped once certainly INVALID); then a confirming "
                   "run at full settings, lowered (by {:g}x, or bound / p99 down to {:g}x) and repeated (at most {}) "
                   "while INVALID",
                   o.start_qps, 1 + o.step, o.tolerance_qps, kConfirmBackoff, kConfirmBackoffMost, o.max_confirms)},
      {"start_qps", o.start_qps},
      {"step", o.step},
      {"tolerance_qps", o.tolerance_qps},
      {"max_probes", o.max_probes},
      {"probes", probes},
      {"outcome", result.outcome}};
  if (result.peak_qps) j["peak_qps"] = *result.peak_qps;
  if (result.lowest_failing_qps) j["lowest_failing_qps"] = *result.lowest_failing_qps;
  return j;
}

}  // namespace moeserve::bench

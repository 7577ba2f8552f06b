// Runs one LoadGen test against a system under test: builds the schedule, issues samples on it (Server: at the
// scheduled times; Offline: all at once; SingleStream: each after the previous completes), records what the SUT
// reports, computes LoadGen's results and writes mlperf_log_summary.txt, mlperf_log_detail.txt and
// mlperf_log_accuracy.json. The issuing rules are LoadGen's IssueQueriesInternal (issue_query_controller.cc) and
// RunPerformanceMode / RunAccuracyMode (loadgen.cc).
#pragma once

#include <atomic>
#include <optional>
#include <string>
#include <vector>

#include "bench/dataset.h"
#include "bench/latency_stats.h"
#include "bench/progress.h"
#include "bench/sut.h"
#include "bench/verdict.h"

namespace moeserve::bench {

class EnergyMeter;

struct BenchConfig {
  EffectiveSettings settings;
  int max_output_tokens = 0;  // per sample, unless the dataset sets an exact output length
  SamplingParams sampling;
  std::string output_dir;                        // where the three LoadGen files go
  std::string schedule_log_path;                 // --log-schedule: one JSON line per issued sample (empty: none)
  std::string loadgen_version;                   // written as loadgen_version in the detail log
  ProgressMode progress = ProgressMode::off;     // a live progress line on stderr
  const std::atomic<bool>* interrupt = nullptr;  // set (e.g. by SIGINT) to cancel outstanding samples and stop
  // One short request before anything is timed (preflight.h); its failure is an Error and the run does not start.
  bool preflight = true;
  std::chrono::seconds preflight_timeout{300};
  // Issuing stops, and outstanding samples are cancelled, after this many samples in a row failed (0: never):
  // a server that fails every request would otherwise be sent the whole schedule.
  int max_consecutive_failures = 10;
  // Stop as soon as the verdict can only be INVALID: a sample failed, or more samples are already over the TTFT
  // or TPOT bound than the target percentile allows out of every sample the schedule holds (find-peak probes).
  bool abort_when_invalid = false;
};

// Everything observed about one generated sample.
struct SampleRecord {
  uint64_t sequence_id = 0;
  uint64_t qsl_idx = 0;
  bool issued = false;
  bool completed = false;
  bool log_accuracy = false;  // its response goes to mlperf_log_accuracy.json
  TimePoint scheduled{};      // latencies count from here
  TimePoint issued_at{};
  std::optional<TimePoint> first_token_at;
  TimePoint completed_at{};
  std::optional<int32_t> first_token;
  int64_t token_count = 0;
  bool token_ids_known = true;
  std::vector<int32_t> tokens;  // kept for samples written to the accuracy log
  std::string finish_reason;
  std::string error;
};

struct RunResult {
  EffectiveSettings settings;
  std::string sut_name;
  TimePoint start{};
  std::vector<SampleRecord> samples;          // the issued samples, in issue order
  std::optional<PerformanceSummary> summary;  // performance mode
  std::optional<Verdict> verdict;             // performance mode
  std::string summary_text;                   // mlperf_log_summary.txt as written
  std::vector<std::string> errors;            // each error written to the detail log
  int warnings = 0;
  uint64_t failed_samples = 0;  // issued samples that completed with an error
  bool interrupted = false;
  std::string aborted;  // why the bench stopped the run itself (consecutive failures); empty when it did not
  std::optional<double> energy_joules;  // NVML energy over the run, when a GPU was measured
  double wall_seconds = 0;
  std::string test_datetime;  // UTC, ISO 8601, when the run started
  // Performance mode: the queries the schedule held (the required count padded for equal issue, or more to fill
  // the minimum duration) and why it held that many.
  uint64_t scheduled_queries = 0;
  std::string schedule_note;
  nlohmann::json sut_timeline;  // SystemUnderTest::timeline over the run (null: none)
};

// `energy` (may be null) is started with the first issue and stopped when the last sample completes. Throws
// moeserve::Error when the preflight request fails (nothing is timed then).
RunResult run_benchmark(SystemUnderTest& sut, const Dataset& dataset, const BenchConfig& config,
                        EnergyMeter* energy = nullptr);

// Whether the run counts: performance mode, LoadGen's verdict plus no failed sample; accuracy mode (which LoadGen
// gives no verdict), every sample answered and no error in the detail log, since the accuracy log is only as good
// as its least complete entry.
bool run_valid(const RunResult& result);
// Every reason the run is INVALID, one sentence each (empty when VALID): LoadGen's verdict's reasons, or in
// accuracy mode "3 of 64 samples failed", "interrupted", "2 errors in the detailed log".
std::vector<std::string> invalid_reasons(const RunResult& result);

}  // namespace moeserve::bench

#include "bench/driver.h"

#include <fmt/chrono.h>
#include <fmt/format.h>

#include <algorithm>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "bench/gpu_info.h"
#include "bench/loadgen_logs.h"
#include "bench/preflight.h"
#include "bench/progress.h"
#include "bench/schedule.h"
#include "util/error.h"
#include "util/files.h"

namespace moeserve::bench {
namespace {

double seconds_between(TimePoint from, TimePoint to) { return std::chrono::duration<double>(to - from).count(); }
int64_t ns_between(TimePoint from, TimePoint to) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(to - from).count();
}

// LoadGen's DateTimeStringForPower: "%m-%d-%Y %T.mmm" in UTC.
std::string power_time(std::chrono::system_clock::time_point t) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count() % 1000;
  return fmt::format("{:%m-%d-%Y %H:%M:%S}.{:03}", fmt::gmtime(std::chrono::system_clock::to_time_t(t)), ms);
}

// Collects the SUT's reports into the records and writes accuracy-log entries as samples complete.
class RunState : public SampleObserver {
 public:
  RunState(const BenchConfig& config, DetailLog& detail, AccuracyLog& accuracy)
      : config_(config), detail_(detail), accuracy_(accuracy) {}

  void add_records(const QuerySchedule& schedule, double accuracy_log_probability, double accuracy_log_offset) {
    std::lock_guard lock(mutex_);
    for (const ScheduledSample& s : schedule.samples) {
      SampleRecord r;
      r.sequence_id = s.sequence_id;
      r.qsl_idx = s.qsl_idx;
      // ResponseDelegateDetailed::SampleComplete: log when (value + offset) wrapped into [0, 1) <= probability.
      const double value = s.accuracy_log_value + accuracy_log_offset < 1.0
                               ? s.accuracy_log_value + accuracy_log_offset
                               : s.accuracy_log_value + accuracy_log_offset - 1.0;
      r.log_accuracy = config_.settings.mode == TestMode::accuracy_only || value <= accuracy_log_probability;
      index_of_.emplace(s.sequence_id, records_.size());
      records_.push_back(std::move(r));
    }
  }

  void mark_issued(uint64_t id, TimePoint scheduled, TimePoint issued_at) {
    std::lock_guard lock(mutex_);
    SampleRecord& r = record(id);
    r.issued = true;
    r.scheduled = scheduled;
    r.issued_at = issued_at;
    issue_order_.push_back(id);
    ++issued_;
  }

  void on_first_token(uint64_t id, std::optional<int32_t> token, TimePoint time) override {
    std::lock_guard lock(mutex_);
    SampleRecord& r = record(id);
    if (r.first_token_at || r.completed) return fail("Attempted to complete a sample twice.");
    r.first_token_at = time;
    r.first_token = token;
  }

  void on_complete(uint64_t id, SampleOutput output, TimePoint time) override {
    std::lock_guard lock(mutex_);
    SampleRecord& r = record(id);
    if (r.completed) return fail("Attempted to complete a sample twice.");
    r.completed = true;
    r.completed_at = time;
    r.token_count = output.token_count;
    r.token_ids_known = output.token_ids_known;
    r.finish_reason = output.finish_reason;
    r.error = output.error;
    completed_tokens_ += std::max<int64_t>(0, output.token_count);
    check_sample(r);
    count_failure(r);
    record_latencies(r);
    check_certainly_invalid(r);
    if (r.log_accuracy) {
      if (!r.first_token && !output.tokens.empty()) r.first_token = output.tokens.front();
      std::vector<int32_t> first;
      if (r.first_token) first.push_back(*r.first_token);
      accuracy_.add(r.sequence_id, r.qsl_idx, output.tokens, first, output.token_count);
      r.tokens = std::move(output.tokens);
    }
    ++completed_;
    done_.notify_all();
  }

  // Blocks until `done()` holds, checking every 100 ms whether the run must stop; true if it must.
  bool wait(const std::function<bool()>& done) {
    std::unique_lock lock(mutex_);
    while (!done()) {
      if (must_stop_locked()) return true;
      done_.wait_for(lock, std::chrono::milliseconds(100));
    }
    return false;
  }
  // Interrupted, or aborted after too many consecutive failures.
  bool must_stop() {
    std::lock_guard lock(mutex_);
    return must_stop_locked();
  }
  std::string aborted() {
    std::lock_guard lock(mutex_);
    return aborted_;
  }
  uint64_t failed() {
    std::lock_guard lock(mutex_);
    return failed_;
  }
  bool wait_all_completed() {
    return wait([this] { return completed_ == issued_; });
  }
  bool wait_completed(uint64_t id) {
    return wait([this, id] { return record(id).completed; });
  }

  // A copy of a record's timing (not its tokens), once the SUT is done with it.
  SampleRecord timing(uint64_t id) {
    std::lock_guard lock(mutex_);
    SampleRecord copy = record(id);
    copy.tokens.clear();
    return copy;
  }
  uint64_t outstanding() {
    std::lock_guard lock(mutex_);
    return issued_ - completed_;
  }
  // What the schedule holds, for the progress line and the result.
  void set_plan(uint64_t samples, std::string note, TimePoint start, int64_t schedule_end_ns) {
    std::lock_guard lock(mutex_);
    planned_samples_ += samples;  // accuracy mode runs one set after another
    plan_note_ = std::move(note);
    plan_start_ = start;
    schedule_end_ns_ = schedule_end_ns;
  }
  // The live line: elapsed against min_duration, issued against the schedule (and why it holds that many), p99
  // TTFT and TPOT so far against their bounds, errors, tokens/s and an ETA.
  std::string status(TimePoint origin) {
    std::lock_guard lock(mutex_);
    const EffectiveSettings& e = config_.settings;
    const TimePoint start = planned_samples_ > 0 ? plan_start_ : origin;
    const double elapsed = std::max(0.0, seconds_between(start, Clock::now()));
    std::string line =
        fmt::format("{} {}: {}", scenario_name(e.scenario), test_mode_name(e.mode), short_duration(elapsed));
    if (e.mode == TestMode::performance_only && e.min_duration_ms > 0)
      line += fmt::format(" of min {}", short_duration(static_cast<double>(e.min_duration_ms) / 1000));
    line += fmt::format(" | issued {}/{} samples", issued_, planned_samples_);
    if (!plan_note_.empty()) line += " (" + plan_note_ + ")";
    line += fmt::format(", {} done, {} in flight", completed_, issued_ - completed_);
    if (e.scenario != Scenario::offline && e.requested.use_token_latencies && !ttft_ns_.empty()) {
      const double p = e.target_latency_percentile;
      const double ttft = percentile_ns(ttft_ns_, p) / 1e9, tpot = percentile_ns(tpot_ns_, p) / 1e6;
      const double ttft_bound = static_cast<double>(e.requested.server_ttft_latency) / 1e9;
      const double tpot_bound = static_cast<double>(e.requested.server_tpot_latency) / 1e6;
      line += fmt::format(" | p{:g} TTFT {:.2f} s / {:g} s {}, TPOT {:.1f} ms / {:g} ms {}", p * 100, ttft, ttft_bound,
                          ttft <= ttft_bound ? "ok" : "OVER", tpot, tpot_bound, tpot <= tpot_bound ? "ok" : "OVER");
    }
    line += fmt::format(" | {} errors | {:.0f} tok/s", errors_.size(),
                        elapsed > 0 ? static_cast<double>(completed_tokens_) / elapsed : 0.0);
    return line + " | ETA " + eta_locked(elapsed);
  }
  std::vector<SampleRecord> issued_records() {
    std::lock_guard lock(mutex_);
    std::vector<SampleRecord> out;
    out.reserve(issue_order_.size());
    for (uint64_t id : issue_order_) out.push_back(std::move(record(id)));
    return out;
  }
  std::vector<std::string> errors() {
    std::lock_guard lock(mutex_);
    return errors_;
  }
  void add_error(const std::string& message) {
    std::lock_guard lock(mutex_);
    fail(message);
  }

 private:
  SampleRecord& record(uint64_t id) {
    auto it = index_of_.find(id);
    MOESERVE_CHECK(it != index_of_.end(), "the SUT reported sample {}, which the bench never issued", id);
    return records_[it->second];
  }
  void fail(const std::string& message) {
    detail_.error("error_runtime", message);
    errors_.push_back(message);
  }
  bool must_stop_locked() const { return (config_.interrupt && config_.interrupt->load()) || !aborted_.empty(); }

  // LoadGen's percentile (sorted[size_t(n * p)]) of what has completed so far.
  static double percentile_ns(std::vector<int64_t> values, double p) {
    if (values.empty()) return 0;
    const size_t k = std::min(values.size() - 1, static_cast<size_t>(static_cast<double>(values.size()) * p));
    std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(k), values.end());
    return static_cast<double>(values[k]);
  }

  // Server: the schedule's end plus the mean latency so far (the last sample still has to run); Offline and
  // SingleStream: the samples left at the rate samples completed so far.
  std::string eta_locked(double elapsed) const {
    if (completed_ == planned_samples_ && planned_samples_ > 0) return "0s";
    if (completed_ == 0) return "?";
    const double per_sample = elapsed / static_cast<double>(completed_);
    const double left = static_cast<double>(planned_samples_ - completed_);
    if (config_.settings.scenario != Scenario::server) return short_duration(per_sample * left);
    const double schedule_left = static_cast<double>(schedule_end_ns_) / 1e9 - elapsed;
    return short_duration(std::max(0.0, schedule_left) + latency_sum_s_ / static_cast<double>(completed_));
  }

  // With abort_when_invalid: the run stops once no outcome of the samples still to come can make it VALID.
  void check_certainly_invalid(const SampleRecord& r) {
    const EffectiveSettings& e = config_.settings;
    if (!config_.abort_when_invalid || !aborted_.empty() || planned_samples_ == 0) return;
    if (!r.error.empty()) {
      aborted_ = "a sample failed, so the run is INVALID whatever comes: " + r.error;
      return;
    }
    if (e.scenario != Scenario::server || !e.requested.use_token_latencies) return;
    // LoadGen's p99 is sorted[size_t(n * p)]: over the bound once n - size_t(n * p) samples are.
    const uint64_t n = planned_samples_;
    const uint64_t k = std::min(n - 1, static_cast<uint64_t>(static_cast<double>(n) * e.target_latency_percentile));
    const uint64_t over_allowed = n - 1 - k;
    if (over_ttft_ > over_allowed || over_tpot_ > over_allowed)
      aborted_ = fmt::format(
          "certainly INVALID: {} samples over the TTFT bound and {} over the TPOT bound, of {} scheduled (at most {} "
          "may be over for p{:g})",
          over_ttft_, over_tpot_, n, over_allowed, e.target_latency_percentile * 100);
  }

  void record_latencies(const SampleRecord& r) {
    const int64_t latency = ns_between(r.scheduled, r.completed_at);
    latency_sum_s_ += static_cast<double>(latency) / 1e9;
    const EffectiveSettings& e = config_.settings;
    if (e.scenario == Scenario::offline || !e.requested.use_token_latencies || !r.error.empty()) return;
    const int64_t ttft = r.first_token_at ? ns_between(r.scheduled, *r.first_token_at) : latency;
    const int64_t tpot = time_per_output_token_ns(latency, ttft, recorded_token_count(r.token_count));
    ttft_ns_.push_back(ttft);
    tpot_ns_.push_back(tpot);
    over_ttft_ += ttft > static_cast<int64_t>(e.requested.server_ttft_latency);
    over_tpot_ += tpot > static_cast<int64_t>(e.requested.server_tpot_latency);
  }
  void count_failure(const SampleRecord& r) {
    if (r.error.empty()) {
      consecutive_failures_ = 0;
      return;
    }
    ++failed_;
    if (++consecutive_failures_ == config_.max_consecutive_failures && aborted_.empty() && !must_stop_locked())
      aborted_ = fmt::format("{} consecutive samples failed, the last with: {}", consecutive_failures_, r.error);
  }
  // LoadGen's checks at completion (AsyncLog::RecordSampleCompletion), plus failures the SUT reported.
  void check_sample(const SampleRecord& r) {
    if (!r.error.empty()) fail(fmt::format("sample {} (qsl_idx {}) failed: {}", r.sequence_id, r.qsl_idx, r.error));
    if (!config_.settings.requested.use_token_latencies) return;
    if (config_.settings.scenario != Scenario::offline && !r.first_token_at)
      fail("Attempted to record a sample latency before it's first token latency");
    if (r.token_count == 0) {
      fail("n_tokens argument missing or attempted to record 0 as number of tokens");
    } else if (r.token_count < 0) {
      fail("Attempted to record a negative number of tokens");
    } else if (r.token_count == 1) {
      fail("Number of tokens need to be greater than 1");
    }
    if (r.log_accuracy && !r.token_ids_known)
      fail(
          fmt::format("sample {}: the SUT reported no token ids, so its accuracy-log entry holds none", r.sequence_id));
  }

  const BenchConfig& config_;
  DetailLog& detail_;
  AccuracyLog& accuracy_;
  std::mutex mutex_;
  std::condition_variable done_;
  std::vector<SampleRecord> records_;
  std::unordered_map<uint64_t, size_t> index_of_;
  std::vector<uint64_t> issue_order_;
  std::vector<std::string> errors_;
  uint64_t issued_ = 0;
  uint64_t completed_ = 0;
  int64_t completed_tokens_ = 0;
  uint64_t failed_ = 0;
  int consecutive_failures_ = 0;
  std::string aborted_;
  uint64_t planned_samples_ = 0;
  std::string plan_note_;
  TimePoint plan_start_{};
  int64_t schedule_end_ns_ = 0;
  std::vector<int64_t> ttft_ns_, tpot_ns_;  // completed samples, for the live percentiles
  uint64_t over_ttft_ = 0, over_tpot_ = 0;
  double latency_sum_s_ = 0;
};

// IssueQueries for one loadable set: issue on the schedule, wait, and gather LoadGen's PerformanceResult.
class SetRunner {
 public:
  SetRunner(SystemUnderTest& sut, const Dataset& dataset, const BenchConfig& config, RunState& state, DetailLog& detail,
            std::ostream* schedule_log)
      : sut_(sut), dataset_(dataset), config_(config), state_(state), detail_(detail), schedule_log_(schedule_log) {}

  PerformanceResult run(const LoadableSampleSet& set, SequenceGen& ids) {
    const EffectiveSettings& e = config_.settings;
    const QuerySchedule schedule = generate_queries(e, set, ids);
    detail_.log("generated_query_count", static_cast<uint64_t>(schedule.queries.size()));
    detail_.log("generated_samples_per_query", schedule.samples_per_query);
    detail_.log("generated_query_duration", schedule.duration_ns);
    state_.add_records(schedule, accuracy_log_probability(), accuracy_log_offset());
    scheduled_queries_ = schedule.queries.size();
    note_ = schedule_note(e, schedule, set.samples.size());

    start_ = Clock::now();
    state_.set_plan(schedule.samples.size(), note_, start_, schedule.duration_ns);
    uint64_t queries_issued = 0;
    TimePoint final_scheduled = start_;
    TimePoint final_issued = start_;
    bool ended = false;  // by one of keep_issuing's checks
    for (const ScheduledQuery& query : schedule.queries) {
      // QueryScheduler<scenario>::Wait: Server sleeps until the scheduled time, SingleStream until the previous
      // query completed (and is scheduled when issued), Offline issues at the start.
      TimePoint scheduled = start_;
      if (e.scenario == Scenario::server) {
        scheduled = start_ + std::chrono::nanoseconds(query.scheduled_ns);
        sleep_until(scheduled);
      } else if (e.scenario == Scenario::single_stream && queries_issued > 0) {
        const ScheduledQuery& previous = schedule.queries[queries_issued - 1];
        for (size_t i = 0; i < previous.sample_count && !stopped_; ++i)
          stopped_ = state_.wait_completed(schedule.samples[previous.first_sample + i].sequence_id);
        scheduled = Clock::now();
      }
      if (stopped_ || state_.must_stop()) {
        stopped_ = true;
        break;
      }
      const TimePoint now = Clock::now();
      if (e.scenario == Scenario::single_stream) scheduled = now;
      issue(query, schedule, scheduled, now);
      ++queries_issued;
      final_scheduled = scheduled;
      final_issued = now;
      if (e.mode == TestMode::accuracy_only) continue;
      if (!keep_issuing(queries_issued, now - start_)) {
        ended = true;
        break;
      }
    }
    // IssueQueries: LoadGen cannot run out of generated queries in Server (its duration is the schedule's).
    if (!ended && !stopped_ && e.mode == TestMode::performance_only && e.scenario != Scenario::server)
      state_.add_error(
          "Ending early: Ran out of generated queries to issue before the minimum query count and test duration "
          "were reached. Please update the relevant expected latency or target qps in the TestSettings so they "
          "are more accurate.");
    sut_.flush();
    if (!stopped_) stopped_ = state_.wait_all_completed();
    if (stopped_) {
      const std::string aborted = state_.aborted();
      state_.add_error(fmt::format("Ending early: {}; outstanding samples were cancelled",
                                   aborted.empty() ? "interrupted" : aborted));
      sut_.cancel_all();
      wait_for_cancelled();
    }
    return gather(schedule, queries_issued, final_scheduled, final_issued);
  }

  TimePoint start() const { return start_; }
  uint64_t scheduled_queries() const { return scheduled_queries_; }
  const std::string& note() const { return note_; }
  // Interrupted or aborted: issuing stopped and outstanding samples were cancelled.
  bool stopped() const { return stopped_; }

 private:
  void sleep_until(TimePoint when) {
    // In slices, so that an interrupt or an abort is noticed during a long gap.
    while (Clock::now() < when && !state_.must_stop())
      std::this_thread::sleep_until(std::min(when, Clock::now() + std::chrono::milliseconds(100)));
  }

  void wait_for_cancelled() {
    // Cancelled samples still complete; wait for them without honouring the (still set) stop condition.
    while (state_.outstanding() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }

  double accuracy_log_probability() const {
    // IssueQueries: a sampling target overrides the probability, over the samples LoadGen expects to issue.
    const EffectiveSettings& e = config_.settings;
    if (e.requested.accuracy_log_sampling_target == 0) return e.requested.accuracy_log_probability;
    auto expected = static_cast<uint64_t>(e.target_qps * static_cast<double>(e.min_duration_ms) / 1000);
    uint64_t minimum = e.min_query_count * e.samples_per_query;
    if (e.scenario != Scenario::offline) {
      expected *= e.samples_per_query;
    } else {
      minimum = e.min_sample_count;
    }
    expected = std::max(expected, minimum);
    return static_cast<double>(e.requested.accuracy_log_sampling_target) / static_cast<double>(expected);
  }

  double accuracy_log_offset() const {
    std::mt19937 rng(config_.settings.requested.accuracy_log_rng_seed);
    return std::uniform_real_distribution<double>(0.0, 1.0)(rng);
  }

  void issue(const ScheduledQuery& query, const QuerySchedule& schedule, TimePoint scheduled, TimePoint now) {
    std::vector<SampleRequest> requests;
    requests.reserve(query.sample_count);
    for (size_t i = 0; i < query.sample_count; ++i) {
      const ScheduledSample& s = schedule.samples[query.first_sample + i];
      const DatasetSample& row = dataset_.samples.at(s.qsl_idx);
      SampleRequest r;
      r.id = s.sequence_id;
      r.qsl_idx = s.qsl_idx;
      r.prompt = row.prompt;
      r.max_tokens = row.output_tokens > 0 ? row.output_tokens : config_.max_output_tokens;
      r.min_tokens = row.output_tokens;
      r.sampling = config_.sampling;
      r.scheduled = scheduled;
      requests.push_back(r);
      state_.mark_issued(s.sequence_id, scheduled, now);
      if (schedule_log_)
        *schedule_log_ << fmt::format("{{\"seq\": {}, \"qsl_idx\": {}, \"scheduled_ns\": {}}}\n", s.sequence_id,
                                      s.qsl_idx, ns_between(start_, scheduled));
    }
    sut_.issue(requests);
  }

  // The end-of-issuing checks of IssueQueriesInternal, after each query in performance mode.
  bool keep_issuing(uint64_t queries_issued, Clock::duration elapsed) {
    const EffectiveSettings& e = config_.settings;
    if (e.scenario == Scenario::server) {
      const uint64_t outstanding = e.max_async_queries != 0 ? state_.outstanding() : 0;
      if (outstanding > e.max_async_queries) {
        state_.add_error(
            fmt::format("IssueQueryThread 0 Ending early: Too many outstanding queries. issued {} "
                        "outstanding {}",
                        queries_issued, outstanding));
        return false;
      }
    } else if (queries_issued >= e.min_query_count && elapsed >= std::chrono::milliseconds(e.target_duration_ms)) {
      detail_.log("generic_message", "Ending naturally: Minimum query count and test duration met.");
      return false;
    }
    if (e.max_query_count != 0 && queries_issued >= e.max_query_count) {
      state_.add_error(
          fmt::format("IssueQueryThread 0 Ending early: Max query count reached. query_count {}", queries_issued));
      return false;
    }
    if (e.max_duration_ms != 0 && elapsed > std::chrono::milliseconds(e.max_duration_ms)) {
      state_.add_error(fmt::format("IssueQueryThread 0 Ending early: Max test duration reached. duration_ns {}",
                                   std::chrono::duration_cast<std::chrono::nanoseconds>(elapsed).count()));
      return false;
    }
    return true;
  }

  PerformanceResult gather(const QuerySchedule& schedule, uint64_t queries_issued, TimePoint final_scheduled,
                           TimePoint final_issued) {
    const bool tokens = config_.settings.requested.use_token_latencies;
    const bool offline = config_.settings.scenario == Scenario::offline;
    PerformanceResult r;
    r.queries_issued = queries_issued;
    int64_t max_latency = 0;
    TimePoint final_done = start_;
    for (size_t q = 0; q < queries_issued; ++q) {
      const ScheduledQuery& query = schedule.queries[q];
      for (size_t i = 0; i < query.sample_count; ++i) {
        const SampleRecord s = state_.timing(schedule.samples[query.first_sample + i].sequence_id);
        const int64_t latency = ns_between(s.scheduled, s.completed_at);
        max_latency = std::max(max_latency, latency);
        // The final query is the last one issued; its last sample's completion is all_samples_done_time.
        if (q + 1 == queries_issued) final_done = std::max(final_done, s.completed_at);
        r.sample_latencies.push_back(latency);
        r.failed_samples += !s.error.empty();
        if (!tokens) continue;
        r.tokens_per_sample.push_back(recorded_token_count(s.token_count));
        if (offline) continue;
        const int64_t ttft = s.first_token_at ? ns_between(s.scheduled, *s.first_token_at) : latency;
        r.first_token_latencies.push_back(ttft);
        r.time_per_output_token.push_back(time_per_output_token_ns(latency, ttft, s.token_count));
      }
    }
    r.max_latency = static_cast<double>(max_latency) * 1e-9;
    r.final_query_scheduled_time = seconds_between(start_, final_scheduled);
    r.final_query_issued_time = seconds_between(start_, final_issued);
    r.final_query_all_samples_done_time = seconds_between(start_, final_done);
    return r;
  }

  SystemUnderTest& sut_;
  const Dataset& dataset_;
  const BenchConfig& config_;
  RunState& state_;
  DetailLog& detail_;
  std::ostream* schedule_log_;
  TimePoint start_{};
  bool stopped_ = false;
  uint64_t scheduled_queries_ = 0;
  std::string note_;
};

}  // namespace

RunResult run_benchmark(SystemUnderTest& sut, const Dataset& dataset, const BenchConfig& config, EnergyMeter* energy) {
  namespace fs = std::filesystem;
  const EffectiveSettings& e = config.settings;
  const auto qsl_count = static_cast<uint64_t>(dataset.samples.size());
  MOESERVE_CHECK(qsl_count > 0, "the dataset {} has no samples", dataset.path);
  fs::create_directories(config.output_dir);
  const fs::path dir(config.output_dir);

  RunResult result;
  result.settings = e;
  result.sut_name = sut.name();
  const TimePoint origin = Clock::now();
  const auto wall_origin = std::chrono::system_clock::now();
  DetailLog detail((dir / "mlperf_log_detail.txt").string(), origin);
  AccuracyLog accuracy((dir / "mlperf_log_accuracy.json").string(), e.requested.use_token_latencies,
                       e.scenario != Scenario::offline);
  std::ofstream schedule_log;
  if (!config.schedule_log_path.empty()) {
    schedule_log.open(config.schedule_log_path);
    MOESERVE_CHECK(schedule_log.good(), "cannot write the schedule log {}", config.schedule_log_path);
  }

  detail.log("loadgen_version", config.loadgen_version);
  result.test_datetime = fmt::format("{:%Y-%m-%dT%H:%M:%SZ}", fmt::gmtime(std::time(nullptr)));
  detail.log("test_datetime", result.test_datetime);
  detail.log("sut_name", result.sut_name);
  detail.log("qsl_name", dataset.format + ":" + dataset.path);
  detail.log("qsl_reported_total_count", qsl_count);
  detail.log("qsl_reported_performance_count", qsl_count);
  log_settings(detail, e);
  const uint64_t wanted = e.mode == TestMode::accuracy_only ? e.accuracy_sample_count : e.performance_sample_count;
  if (wanted > qsl_count)
    detail.warning(
        "warning_generic_message",
        fmt::format("{} sample count {} exceeds the dataset's {} samples; using {}",
                    e.mode == TestMode::accuracy_only ? "accuracy" : "performance", wanted, qsl_count, qsl_count));

  RunState state(config, detail, accuracy);
  ObserverSwitch observers;
  Preflight preflight;  // outlives the run: the SUT may still be returning from its report when the run begins
  observers.route_to(&preflight);
  sut.start(observers);
  if (config.preflight) {
    try {
      preflight.run(sut, dataset.samples.front(), config.sampling,
                    {.timeout = config.preflight_timeout, .interrupt = config.interrupt});
    } catch (const Error& e) {
      detail.error("error_runtime", e.what());
      sut.stop();
      throw;
    }
  }
  observers.route_to(&state);
  SetRunner runner(sut, dataset, config, state, detail, schedule_log.is_open() ? &schedule_log : nullptr);
  ProgressLine progress([&] { return state.status(origin); }, config.progress);
  SequenceGen ids;
  const std::vector<LoadableSampleSet> sets = generate_loadable_sets(e, wanted, qsl_count);
  if (e.mode == TestMode::performance_only) {
    detail.log("generic_message", "Starting performance mode");
    detail.log("loaded_qsl_set", sets.front().samples);
    if (energy) energy->start();
    PerformanceResult pr = runner.run(sets.front(), ids);
    if (energy) result.energy_joules = energy->stop();
    const auto sut_active = std::chrono::duration_cast<std::chrono::system_clock::duration>(
        std::chrono::duration<double>(pr.final_query_all_samples_done_time));
    const auto wall_start =
        wall_origin + std::chrono::duration_cast<std::chrono::system_clock::duration>(runner.start() - origin);
    detail.log("power_begin", power_time(wall_start));
    detail.log("power_end", power_time(wall_start + sut_active));
    PerformanceSummary summary = summarize(std::move(pr), e);
    Verdict verdict = judge(summary, e);
    log_results(detail, e, summary, verdict);
    detail.log("num_errors", static_cast<int64_t>(detail.error_count()));
    result.summary_text = summary_text(result.sut_name, e, summary, verdict);
    result.summary = std::move(summary);
    result.verdict = std::move(verdict);
  } else {
    detail.log("generic_message", "Starting accuracy mode");
    for (const LoadableSampleSet& set : sets) {
      detail.log("loaded_qsl_set", set.samples);
      runner.run(set, ids);
      if (runner.stopped()) break;
    }
  }
  progress.finish();
  sut.stop();
  accuracy.close();
  result.start = runner.start();
  result.sut_timeline = sut.timeline(result.start);
  result.scheduled_queries = runner.scheduled_queries();
  result.schedule_note = runner.note();
  result.interrupted = config.interrupt && config.interrupt->load();
  result.aborted = state.aborted();
  result.failed_samples = state.failed();
  result.samples = state.issued_records();
  result.errors = state.errors();
  result.warnings = detail.warning_count();
  if (e.mode == TestMode::accuracy_only && !run_valid(result)) {
    // LoadGen gives accuracy runs no verdict; a log with missing answers must not pass for a complete one.
    std::string why;
    for (const std::string& reason : invalid_reasons(result)) why += (why.empty() ? "" : "; ") + reason;
    result.summary_text = "Accuracy run INVALID: " + why + "\n";
    detail.log("result_validity", "INVALID");
    detail.log("result_invalid_reason", why);
  }
  result.summary_text += summary_trailer(detail.warning_count(), detail.error_count());
  write_text_file((dir / "mlperf_log_summary.txt").string(), result.summary_text);
  result.wall_seconds = seconds_between(origin, Clock::now());
  return result;
}

bool run_valid(const RunResult& result) {
  if (result.verdict) return result.verdict->valid;
  return invalid_reasons(result).empty();
}

std::vector<std::string> invalid_reasons(const RunResult& r) {
  if (r.verdict) return r.verdict->reasons;
  std::vector<std::string> reasons;
  if (r.failed_samples > 0) reasons.push_back(failed_samples_text(r.failed_samples, r.samples.size()));
  if (r.interrupted) reasons.push_back("interrupted");
  if (r.failed_samples == 0 && !r.errors.empty())
    reasons.push_back(fmt::format("{} errors in the detailed log", r.errors.size()));
  return reasons;
}

}  // namespace moeserve::bench

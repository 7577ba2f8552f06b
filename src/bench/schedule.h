// Which samples a run issues, in which order and at which scheduled times: LoadGen's GenerateLoadableSets and
// GenerateQueries (loadgen/loadgen.cc, 6.0.17) reproduced step for step, so that the same settings and seeds give
// the same qsl_idx sequence at the same scheduled nanoseconds.
//
// Reproducibility across machines: std::mt19937 is fully specified by the C++ standard, but std::shuffle,
// std::uniform_int_distribution, std::uniform_real_distribution and std::exponential_distribution are not; their
// results depend on the standard library. LoadGen's reference builds use GCC and libstdc++, as moeserve does, so
// the sequences agree. Built against another library (libc++, MSVC) both LoadGen and this code would produce
// other, equally valid, sequences.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "bench/settings.h"

namespace moeserve::bench {

// A set of QSL indices that LoadGen would load into memory together; the performance set is the first one.
struct LoadableSampleSet {
  std::vector<uint64_t> samples;
  uint64_t distribution_end = 0;  // samples drawn from [0, distribution_end) of `samples`
};

// Shuffles 0..min(total_sample_count, qsl_total_count)-1 with mt19937(qsl_rng_seed) and cuts the result into sets
// of performance_sample_count. total_sample_count is the performance sample count in performance mode and the
// accuracy sample count in accuracy mode.
std::vector<LoadableSampleSet> generate_loadable_sets(const EffectiveSettings& settings, uint64_t total_sample_count,
                                                      uint64_t qsl_total_count);

// LoadGen's SequenceGen: every generated sample gets the next sequence id (seq_id in the accuracy log) and a
// uniform draw that decides whether performance mode logs its response. LoadGen never seeds that generator
// (SequenceGen::InitAccLogRng is never called), so it runs from mt19937's default seed; we do the same.
class SequenceGen {
 public:
  uint64_t next_sample_id() { return next_sample_id_++; }
  double next_accuracy_log_value() { return accuracy_log_dist_(accuracy_log_rng_); }

 private:
  uint64_t next_sample_id_ = 0;
  std::mt19937 accuracy_log_rng_;
  std::uniform_real_distribution<double> accuracy_log_dist_{0.0, 1.0};
};

struct ScheduledSample {
  uint64_t sequence_id = 0;
  uint64_t qsl_idx = 0;
  double accuracy_log_value = 0;
};

struct ScheduledQuery {
  int64_t scheduled_ns = 0;  // from the start of issuing (Server); 0 for the other scenarios
  size_t first_sample = 0;   // the query's samples are samples[first_sample, first_sample + sample_count)
  size_t sample_count = 0;
};

struct QuerySchedule {
  std::vector<ScheduledQuery> queries;
  std::vector<ScheduledSample> samples;
  uint64_t samples_per_query = 0;  // after equal-issue padding (LoadGen's generated_samples_per_query)
  int64_t duration_ns = 0;         // the timestamp after the last query (LoadGen's generated_query_duration)
};

// GenerateQueries<scenario, mode> for one loadable set.
QuerySchedule generate_queries(const EffectiveSettings& settings, const LoadableSampleSet& set, SequenceGen& ids);

// Why a schedule holds as many queries as it does, LoadGen's rules made visible for the progress line and the
// report: "min_query_count 100, padded to 128 (whole sets of 64 samples: equal issue), 140 to fill min_duration
// 20 s at 6 qps". `loaded` is the loaded set's size.
std::string schedule_note(const EffectiveSettings& settings, const QuerySchedule& schedule, uint64_t loaded);

}  // namespace moeserve::bench

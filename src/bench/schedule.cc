#include "bench/schedule.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <numeric>
#include <optional>

#include "util/error.h"

namespace moeserve::bench {

std::vector<LoadableSampleSet> generate_loadable_sets(const EffectiveSettings& settings, uint64_t total_sample_count,
                                                      uint64_t qsl_total_count) {
  // GenerateLoadableSets: shuffle, then partition into sets of performance_sample_count (no MultiStream padding).
  std::mt19937 qsl_rng(settings.requested.qsl_rng_seed);
  const uint64_t count = std::min(total_sample_count, qsl_total_count);
  std::vector<uint64_t> samples(count);
  std::iota(samples.begin(), samples.end(), uint64_t{0});
  std::shuffle(samples.begin(), samples.end(), qsl_rng);

  const uint64_t set_size = settings.performance_sample_count;
  MOESERVE_CHECK(set_size > 0, "the performance sample count is 0 (an empty dataset?)");
  std::vector<LoadableSampleSet> sets;
  for (uint64_t begin = 0; begin < count; begin += set_size) {
    const uint64_t end = std::min(count, begin + set_size);
    LoadableSampleSet set;
    set.samples.assign(samples.begin() + begin, samples.begin() + end);
    set.distribution_end = set.samples.size();
    sets.push_back(std::move(set));
  }
  return sets;
}

namespace {

// SampleDistribution<AccuracyOnly>: indices of the set in one shuffled order, handed out in turn.
class ShuffledOnce {
 public:
  ShuffledOnce(uint64_t count, std::mt19937& rng) : indices_(count) {
    std::iota(indices_.begin(), indices_.end(), uint64_t{0});
    std::shuffle(indices_.begin(), indices_.end(), rng);
  }
  uint64_t next() {
    MOESERVE_CHECK(next_ < indices_.size(), "internal: ran past the shuffled sample indices");
    return indices_[next_++];
  }

 private:
  std::vector<uint64_t> indices_;
  size_t next_ = 0;
};

// SampleDistributionEqualIssue: ceil(query_count / set_size) permutations of the set, each shuffled, handed out in
// turn and from the start again once used up (LoadGen bumps min_queries later without drawing new permutations).
class EqualIssue {
 public:
  EqualIssue(uint64_t query_count, uint64_t set_size, std::mt19937& rng) {
    std::vector<uint64_t> permutation(set_size);
    std::iota(permutation.begin(), permutation.end(), uint64_t{0});
    for (uint64_t j = 0; j < query_count; j += set_size) {
      std::shuffle(permutation.begin(), permutation.end(), rng);
      indices_.insert(indices_.end(), permutation.begin(), permutation.end());
    }
  }
  uint64_t next() {
    MOESERVE_CHECK(!indices_.empty(), "internal: equal-issue distribution is empty");
    return indices_[(next_++) % indices_.size()];
  }

 private:
  std::vector<uint64_t> indices_;
  size_t next_ = 0;
};

// ScheduleDistribution: exponential inter-arrival times for Server (a Poisson process), a fixed period otherwise.
// Both convert seconds to nanoseconds with duration_cast (truncation), as LoadGen does.
std::chrono::nanoseconds next_interval(Scenario scenario, double qps, std::exponential_distribution<>& exponential,
                                       std::mt19937& rng) {
  if (scenario == Scenario::server)
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::duration<double>(exponential(rng)));
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::duration<double>(1.0 / qps));
}

}  // namespace

QuerySchedule generate_queries(const EffectiveSettings& settings, const LoadableSampleSet& set, SequenceGen& ids) {
  const TestSettings& requested = settings.requested;
  const bool accuracy = settings.mode == TestMode::accuracy_only;
  const bool offline = settings.scenario == Scenario::offline;
  const std::vector<uint64_t>& loaded = set.samples;
  const uint64_t loaded_count = loaded.size();

  // Server's duration depends only on scheduled times; the others generate 2x what they expect to need.
  const int duration_multiplier = settings.scenario == Scenario::server ? 1 : 2;
  std::chrono::nanoseconds gen_duration = duration_multiplier * std::chrono::milliseconds(settings.target_duration_ms);
  uint64_t min_queries = settings.min_query_count;
  uint64_t samples_per_query = settings.samples_per_query;
  if (accuracy && offline) samples_per_query = set.distribution_end;
  if (accuracy || requested.performance_issue_unique) {
    gen_duration = std::chrono::nanoseconds(0);
    min_queries = loaded_count / samples_per_query;  // integer truncation, as in LoadGen
  }

  std::mt19937 sample_rng(requested.sample_index_rng_seed);
  std::mt19937 schedule_rng(requested.schedule_rng_seed);
  // The distributions draw from sample_rng as they are built, in this order: accuracy mode's own shuffle, the
  // "unique" shuffle (always built), then the equal-issue permutations for the unpadded min_queries.
  std::uniform_int_distribution<> uniform_index(0, static_cast<int>(set.distribution_end) - 1);
  std::optional<ShuffledOnce> accuracy_order;
  if (accuracy) accuracy_order.emplace(set.distribution_end, sample_rng);
  ShuffledOnce unique_order(set.distribution_end, sample_rng);
  EqualIssue equal_issue_order(min_queries, loaded_count, sample_rng);
  std::exponential_distribution<> exponential(settings.target_qps);

  const bool equal_issue = requested.sample_concatenate_permutation;
  if (!accuracy && equal_issue) {
    if (offline && samples_per_query % loaded_count != 0) {
      samples_per_query += loaded_count - samples_per_query % loaded_count;
    } else if (!offline && min_queries % loaded_count != 0) {
      min_queries += loaded_count - min_queries % loaded_count;
    }
  }

  QuerySchedule schedule;
  schedule.samples_per_query = samples_per_query;
  std::vector<uint64_t> query_samples(samples_per_query);
  std::chrono::nanoseconds timestamp(0);
  std::chrono::nanoseconds prev_timestamp(0);
  const uint64_t same_sample = requested.performance_issue_same_index;
  while (prev_timestamp < gen_duration || schedule.queries.size() < min_queries) {
    if (offline) {
      // Offline repeats the loaded set (each copy shuffled in equal-issue mode) up to samples_per_query.
      if (requested.performance_issue_same) {
        std::fill(query_samples.begin(), query_samples.end(), loaded[same_sample]);
      } else {
        const uint64_t full_repeats = samples_per_query / loaded_count;
        for (uint64_t i = 0; i < full_repeats; ++i) {
          auto first = query_samples.begin() + static_cast<std::ptrdiff_t>(i * loaded_count);
          std::copy(loaded.begin(), loaded.end(), first);
          if (equal_issue) std::shuffle(first, first + static_cast<std::ptrdiff_t>(loaded_count), sample_rng);
        }
        std::copy(loaded.begin(), loaded.begin() + static_cast<std::ptrdiff_t>(samples_per_query % loaded_count),
                  query_samples.begin() + static_cast<std::ptrdiff_t>(full_repeats * loaded_count));
      }
    } else {
      for (uint64_t& s : query_samples) {
        uint64_t index = 0;
        if (requested.performance_issue_unique) {
          index = unique_order.next();
        } else if (requested.performance_issue_same) {
          index = same_sample;
        } else if (equal_issue) {
          index = equal_issue_order.next();
        } else if (accuracy) {
          index = accuracy_order->next();
        } else {
          index = static_cast<uint64_t>(uniform_index(sample_rng));
        }
        s = loaded[index];
      }
    }
    ScheduledQuery query;
    query.scheduled_ns = timestamp.count();
    query.first_sample = schedule.samples.size();
    query.sample_count = query_samples.size();
    for (uint64_t qsl_idx : query_samples)
      schedule.samples.push_back({ids.next_sample_id(), qsl_idx, ids.next_accuracy_log_value()});
    schedule.queries.push_back(query);
    prev_timestamp = timestamp;
    timestamp += next_interval(settings.scenario, settings.target_qps, exponential, schedule_rng);
    // Equal issue: while the schedule is still shorter than the minimum duration, add another whole set.
    if (equal_issue && schedule.queries.size() >= min_queries && prev_timestamp < gen_duration && !offline)
      min_queries += loaded_count;
  }
  // LoadGen adds a "remainder" query for Offline accuracy runs when the loaded set is not a multiple of
  // samples_per_query; without MultiStream padding samples_per_query equals the set size, so there is none.
  schedule.duration_ns = timestamp.count();
  return schedule;
}

std::string schedule_note(const EffectiveSettings& e, const QuerySchedule& schedule, uint64_t loaded) {
  const bool equal_issue = e.requested.sample_concatenate_permutation;
  if (e.mode == TestMode::accuracy_only) return "accuracy: every sample once";
  if (e.scenario == Scenario::offline)
    return fmt::format("one query of {} samples: max(min_query_count, 1.1 x min_duration x expected qps){}",
                       schedule.samples_per_query,
                       equal_issue ? fmt::format(", padded to whole copies of the {}-sample set", loaded) : "");
  std::string note = fmt::format("min_query_count {}", e.min_query_count);
  uint64_t padded = e.min_query_count;
  if (equal_issue && loaded > 0 && padded % loaded != 0) {
    padded += loaded - padded % loaded;
    note += fmt::format(", padded to {} (whole sets of {} samples: equal issue)", padded, loaded);
  }
  if (schedule.queries.size() > padded)
    note += fmt::format(", {} to fill min_duration {:g} s at {:g} qps", schedule.queries.size(),
                        static_cast<double>(e.min_duration_ms) / 1000, e.target_qps);
  return note;
}

}  // namespace moeserve::bench

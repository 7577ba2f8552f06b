// The schedule against LoadGen itself: fixtures/loadgen_*.txt hold what LoadGen 6.0.17's GenerateLoadableSets and
// GenerateQueries produced for the same mlperf.conf, user.conf and QSL size (see the fixtures' headers), and the
// bench must produce the same sets, the same qsl_idx sequence and the same scheduled nanoseconds. Then properties
// of the Poisson schedule that hold for any seed.
#include "bench/schedule.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "loadgen_fixture.h"

namespace moeserve::bench {
namespace {

using testing::read_fixture;
using testing::settings_from;

void expect_same_as_loadgen(const std::string& name) {
  SCOPED_TRACE(name);
  const testing::LoadGenFixture f = read_fixture(name);
  ASSERT_FALSE(f.sets.empty());
  const EffectiveSettings e = settings_from(f);
  std::ostringstream eff;
  eff << "EFF spq=" << e.samples_per_query << " qps=" << e.target_qps << " min_q=" << e.min_query_count
      << " min_dur=" << e.min_duration_ms << " perf_count=" << e.performance_sample_count
      << " acc_count=" << e.accuracy_sample_count;
  EXPECT_EQ(f.effective.substr(0, eff.str().size()), eff.str());

  const uint64_t count = e.mode == TestMode::accuracy_only ? e.accuracy_sample_count : e.performance_sample_count;
  const std::vector<LoadableSampleSet> sets = generate_loadable_sets(e, count, f.qsl_total);
  ASSERT_EQ(sets.size(), f.sets.size());
  SequenceGen ids;
  for (size_t s = 0; s < sets.size(); ++s) {
    EXPECT_EQ(sets[s].samples, f.sets[s]);
    const QuerySchedule schedule = generate_queries(e, sets[s], ids);
    ASSERT_EQ(schedule.queries.size(), f.queries[s].size());
    for (size_t q = 0; q < schedule.queries.size(); ++q) {
      const ScheduledQuery& query = schedule.queries[q];
      ASSERT_EQ(query.scheduled_ns, f.queries[s][q].first) << "query " << q;
      std::vector<uint64_t> samples;
      for (size_t i = 0; i < query.sample_count; ++i)
        samples.push_back(schedule.samples[query.first_sample + i].qsl_idx);
      ASSERT_EQ(samples, f.queries[s][q].second) << "query " << q;
    }
    if (s == 0) {
      EXPECT_DOUBLE_EQ(schedule.samples[0].accuracy_log_value, f.first_accuracy_log_value);
    }
  }
}

TEST(ScheduleAgainstLoadGen, ServerEqualIssuePaddedAndBumpedToMinDuration) { expect_same_as_loadgen("server_perf"); }
TEST(ScheduleAgainstLoadGen, OfflineEqualIssuePaddedToWholeSets) { expect_same_as_loadgen("offline_perf"); }
TEST(ScheduleAgainstLoadGen, ServerAccuracyOverTwoLoadableSets) { expect_same_as_loadgen("server_accuracy"); }
TEST(ScheduleAgainstLoadGen, OfflineAccuracyOverTwoLoadableSets) { expect_same_as_loadgen("offline_accuracy"); }
TEST(ScheduleAgainstLoadGen, ServerWithoutEqualIssueDrawsUniformly) { expect_same_as_loadgen("server_uniform"); }
TEST(ScheduleAgainstLoadGen, ServerPerformanceIssueUnique) { expect_same_as_loadgen("server_unique"); }
TEST(ScheduleAgainstLoadGen, InteractiveWithV60Seeds) { expect_same_as_loadgen("interactive_v60"); }
TEST(ScheduleAgainstLoadGen, SingleStreamEqualIssue) { expect_same_as_loadgen("singlestream_perf"); }

EffectiveSettings poisson_settings(double qps, uint64_t schedule_seed, uint64_t duration_ms) {
  TestSettings s;
  s.scenario = Scenario::server;
  s.server_target_qps = qps;
  s.min_duration_ms = duration_ms;
  s.min_query_count = 1;
  s.schedule_rng_seed = schedule_seed;
  s.sample_index_rng_seed = 7;
  s.qsl_rng_seed = 11;
  return effective_settings(s, 100, 100);
}

QuerySchedule poisson_schedule(const EffectiveSettings& e) {
  SequenceGen ids;
  return generate_queries(e, generate_loadable_sets(e, e.performance_sample_count, 100).front(), ids);
}

TEST(Schedule, SameSeedsGiveTheSameScheduleAndOtherSeedsAnother) {
  const QuerySchedule a = poisson_schedule(poisson_settings(5, 42, 60000));
  const QuerySchedule b = poisson_schedule(poisson_settings(5, 42, 60000));
  const QuerySchedule c = poisson_schedule(poisson_settings(5, 43, 60000));
  ASSERT_EQ(a.queries.size(), b.queries.size());
  for (size_t i = 0; i < a.queries.size(); ++i) {
    EXPECT_EQ(a.queries[i].scheduled_ns, b.queries[i].scheduled_ns);
    EXPECT_EQ(a.samples[i].qsl_idx, b.samples[i].qsl_idx);
  }
  EXPECT_NE(a.queries[1].scheduled_ns, c.queries[1].scheduled_ns);
}

TEST(Schedule, PoissonMeanRateMatchesTargetQps) {
  // n exponential gaps of mean 1/qps: their mean has standard deviation (1/qps)/sqrt(n); allow 5 of them.
  for (double qps : {0.5, 20.0, 400.0}) {
    const EffectiveSettings e = poisson_settings(qps, 1234, static_cast<uint64_t>(20000 / qps * 1000));
    const QuerySchedule s = poisson_schedule(e);
    const double n = static_cast<double>(s.queries.size() - 1);
    ASSERT_GT(n, 19000);
    const double mean_gap = s.queries.back().scheduled_ns * 1e-9 / n;
    EXPECT_NEAR(mean_gap, 1.0 / qps, 5.0 * (1.0 / qps) / std::sqrt(n)) << "qps " << qps;
    // The last query is the first scheduled at or after min_duration.
    EXPECT_GE(s.queries.back().scheduled_ns, e.min_duration_ms * 1000000);
    EXPECT_LT(s.queries[s.queries.size() - 2].scheduled_ns, e.min_duration_ms * 1000000);
  }
}

}  // namespace
}  // namespace moeserve::bench

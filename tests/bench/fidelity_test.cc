// Fidelity to LoadGen through the whole bench run: with LoadGen's own mlperf.conf and the issue's user.conf
// (gpt-oss-120b, performance_sample_count_override 64, target_qps 20, min_duration 10 s, min_query_count 100), the
// driver issues the qsl_idx sequence LoadGen 6.0.17 generates, at the same scheduled nanoseconds (read back from
// --log-schedule), pads equal issue to the same count, and prints the verdict lines and early-stopping texts
// LoadGen would for a SUT that answers every sample at once.
#include <gtest/gtest.h>

#include <fstream>

#include "bench/driver.h"
#include "bench_test_util.h"
#include "loadgen_fixture.h"

namespace moeserve::bench {
namespace {

// Answers every sample at once with the tokens [7, 8].
class InstantSut : public SystemUnderTest {
 public:
  std::string name() const override { return "instant"; }
  nlohmann::json describe() const override { return {{"kind", "test"}}; }
  void start(SampleObserver& observer) override { observer_ = &observer; }
  void issue(std::span<const SampleRequest> samples) override {
    for (const SampleRequest& s : samples) {
      const TimePoint now = Clock::now();
      observer_->on_first_token(s.id, 7, now);
      SampleOutput out;
      out.tokens = {7, 8};
      out.token_count = 2;
      observer_->on_complete(s.id, std::move(out), now);
    }
  }
  void cancel_all() override {}
  void stop() override {}

 private:
  SampleObserver* observer_ = nullptr;
};

struct Issued {
  uint64_t qsl_idx;
  int64_t scheduled_ns;
};

std::vector<Issued> read_schedule_log(const std::string& path) {
  std::ifstream in(path);
  std::vector<Issued> issued;
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    issued.push_back({j["qsl_idx"].get<uint64_t>(), j["scheduled_ns"].get<int64_t>()});
  }
  return issued;
}

RunResult run_fixture(const testing::LoadGenFixture& f, const std::string& label, std::string& schedule_log) {
  const std::string mlperf_conf = MOESERVE_SOURCE_DIR "/tests/fixtures/loadgen/mlperf.conf";
  BenchConfig config = testing::small_run(Scenario::server, TestMode::performance_only, 1, 2, label);
  config.settings = testing::settings_from(f, ConfFile::read(mlperf_conf));
  config.schedule_log_path = config.output_dir + "/schedule.jsonl";
  schedule_log = config.schedule_log_path;
  Dataset d;
  d.format = "test";
  d.path = "qsl";
  for (uint64_t i = 0; i < f.qsl_total; ++i) d.samples.push_back({{1, 2, static_cast<int32_t>(i)}, 0, "", ""});
  InstantSut sut;
  return run_benchmark(sut, d, config);
}

TEST(LoadGenFidelity, ServerIssuesLoadGensSequenceAtLoadGensTimes) {
  const testing::LoadGenFixture f = testing::read_fixture("server_perf");
  std::string log;
  const RunResult r = run_fixture(f, "fidelity-server", log);
  const std::vector<Issued> issued = read_schedule_log(log);
  const auto& expected = f.queries.front();
  ASSERT_EQ(issued.size(), expected.size());  // 100 padded to 128, bumped to 256 by min_duration
  ASSERT_EQ(issued.size(), 256u);
  for (size_t i = 0; i < issued.size(); ++i) {
    EXPECT_EQ(issued[i].qsl_idx, expected[i].second.front()) << i;
    EXPECT_EQ(issued[i].scheduled_ns, expected[i].first) << i;
  }
  // Every latency is tiny, so nothing is over the bounds; 256 queries are too few to early-stop at p99 with 99%
  // confidence (459 needed with none over), exactly as LoadGen would report.
  ASSERT_TRUE(r.summary.has_value());
  EXPECT_NE(r.summary_text.find("Result is : INVALID\n  Performance constraints satisfied : Yes\n"
                                "  Min duration satisfied : Yes\n  Min queries satisfied : Yes\n"
                                "  Early stopping satisfied: NO\n"),
            std::string::npos)
      << r.summary_text;
  EXPECT_NE(r.summary_text.find("TTFT Early Stopping Result:\n\nTPOT Early Stopping Result:\n * Run unsuccessful.\n"
                                " * Processed 256 queries.\n * Would need to run at least 203 more queries,\n"
                                " with the run being successful if every additional\n query were under latency.\n"),
            std::string::npos)
      << r.summary_text;
  EXPECT_NE(r.summary_text.find("performance_sample_count : 64\n"), std::string::npos);
}

TEST(LoadGenFidelity, OfflineIssuesLoadGensPaddedQuery) {
  const testing::LoadGenFixture f = testing::read_fixture("offline_perf");
  std::string log;
  const RunResult r = run_fixture(f, "fidelity-offline", log);
  const std::vector<Issued> issued = read_schedule_log(log);
  const std::vector<uint64_t>& expected = f.queries.front().front().second;
  ASSERT_EQ(expected.size(), 256u);  // max(100, 1.1 * 10 s * 20/s) = 220, padded to 4 x 64
  ASSERT_EQ(issued.size(), expected.size());
  for (size_t i = 0; i < issued.size(); ++i) {
    EXPECT_EQ(issued[i].qsl_idx, expected[i]) << i;
    EXPECT_EQ(issued[i].scheduled_ns, 0);
  }
  EXPECT_NE(r.summary_text.find("Result is : INVALID\n  Min duration satisfied : NO\n  Min queries satisfied : Yes\n"
                                "  Early stopping satisfied: Yes\nRecommendations:\n * Increase expected QPS so the "
                                "loadgen pre-generates a larger (coalesced) query.\n"),
            std::string::npos)
      << r.summary_text;
  EXPECT_NE(r.summary_text.find("samples_per_query : 220\n"), std::string::npos);
}

}  // namespace
}  // namespace moeserve::bench

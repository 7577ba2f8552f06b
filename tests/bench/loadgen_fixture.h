// The LoadGen fixtures (fixtures/loadgen_*.txt): what LoadGen 6.0.17 itself generated for a model, scenario, mode,
// QSL size, round of seeds and user.conf, as loadable sets and queries (scheduled ns, qsl_idx list).
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "bench/settings.h"

namespace moeserve::bench::testing {

struct LoadGenFixture {
  std::string model, scenario, mode, round;
  uint64_t qsl_total = 0;
  std::string user_conf;
  std::string effective;  // the EFF line
  std::vector<std::vector<uint64_t>> sets;
  std::vector<std::vector<std::pair<int64_t, std::vector<uint64_t>>>> queries;  // per set
  double first_accuracy_log_value = -1;
};

inline LoadGenFixture read_fixture(const std::string& name) {
  std::ifstream in(MOESERVE_SOURCE_DIR "/tests/bench/fixtures/loadgen_" + name + ".txt");
  EXPECT_TRUE(in.good()) << name;
  LoadGenFixture f;
  for (std::string line; std::getline(in, line);) {
    std::istringstream words(line);
    std::string tag;
    words >> tag;
    if (tag == "run") {
      words >> f.model >> f.scenario >> f.mode >> f.qsl_total >> f.round;
    } else if (tag == "conf") {
      f.user_conf += line.substr(5) + "\n";
    } else if (tag == "EFF") {
      f.effective = line;
    } else if (tag == "SET") {
      std::string size, end;
      words >> size >> end;
      f.sets.emplace_back();
      for (uint64_t i; words >> i;) f.sets.back().push_back(i);
      f.queries.emplace_back();
    } else if (tag == "Q") {
      int64_t ns = 0;
      words >> ns;
      std::vector<uint64_t> samples;
      for (std::string s; words >> s;) {
        const size_t colon = s.find(':');
        samples.push_back(std::stoull(s.substr(0, colon)));
        if (colon != std::string::npos && f.first_accuracy_log_value < 0)
          f.first_accuracy_log_value = std::stod(s.substr(colon + 1));
      }
      f.queries.back().emplace_back(ns, std::move(samples));
    }
  }
  return f;
}

inline Scenario scenario_from(const std::string& name) {
  return name == "Server" ? Scenario::server : name == "Offline" ? Scenario::offline : Scenario::single_stream;
}

// The fixture's settings: `mlperf_conf` (the built-in copy unless given), the round's seeds, its user.conf.
inline EffectiveSettings settings_from(const LoadGenFixture& f,
                                       const ConfFile& mlperf_conf = ConfFile::parse(kBuiltinMlperfConf, "built-in")) {
  TestSettings s;
  s.scenario = scenario_from(f.scenario);
  s.mode = f.mode == "acc" ? TestMode::accuracy_only : TestMode::performance_only;
  apply_conf(mlperf_conf, f.model, s.scenario, ConfRole::mlperf_conf, s);
  const RoundSeeds seeds = round_seeds(f.round);
  s.qsl_rng_seed = seeds.qsl_rng_seed;
  s.sample_index_rng_seed = seeds.sample_index_rng_seed;
  s.schedule_rng_seed = seeds.schedule_rng_seed;
  apply_conf(ConfFile::parse(f.user_conf, "user.conf"), f.model, s.scenario, ConfRole::user_conf, s);
  return effective_settings(s, f.qsl_total, f.qsl_total);
}

}  // namespace moeserve::bench::testing

#include "bench/conf_file.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <sstream>
#include <vector>

#include "util/error.h"
#include "util/files.h"

namespace moeserve::bench {
namespace {

// LoadGen accepts a value token that strtoul or strtod reads whole (base detection: 0x.., 0..).
bool is_number(const std::string& token) {
  const char* start = token.c_str();
  char* stop = nullptr;
  (void)std::strtoul(start, &stop, 0);
  if (stop == start + token.size()) return true;
  (void)std::strtod(start, &stop);
  return stop == start + token.size();
}

// A number strtod reads as infinite or NaN ("inf", "nan", "1e400"): LoadGen would take it and size a schedule
// by it.
bool is_finite_number(const std::string& token) {
  errno = 0;
  const double value = std::strtod(token.c_str(), nullptr);
  return std::isfinite(value) && !(errno == ERANGE && std::abs(value) > 1);
}

bool known_scenario(const std::string& scenario) {
  return scenario == "*" || scenario == "SingleStream" || scenario == "MultiStream" || scenario == "Server" ||
         scenario == "Offline";
}

}  // namespace

ConfFile ConfFile::parse(const std::string& text, const std::string& source) {
  ConfFile conf;
  conf.source_ = source;
  std::istringstream lines(text);
  std::string line;
  int line_number = 0;
  while (std::getline(lines, line)) {
    ++line_number;
    const std::string origin = source + ":" + std::to_string(line_number);
    std::istringstream words(line);
    std::vector<std::string> tokens;
    for (std::string token; words >> token;) tokens.push_back(token);
    if (tokens.empty() || tokens[0][0] == '#') continue;
    MOESERVE_CHECK(tokens.size() >= 2 && tokens[1] == "=",
                   "{}: expected 'model.Scenario.key = value' with spaces around '=' (LoadGen ignores '{}')", origin,
                   line);
    MOESERVE_CHECK(tokens.size() == 3, "{}: expected one value after '=' (LoadGen rejects '{}')", origin, line);
    // Model names may contain dots (wan-2.2-t2v-a14b): the scenario and key are the last two parts.
    const std::string& key = tokens[0];
    const size_t key_dot = key.rfind('.');
    const size_t scenario_dot =
        key_dot == std::string::npos || key_dot == 0 ? std::string::npos : key.rfind('.', key_dot - 1);
    MOESERVE_CHECK(
        scenario_dot != std::string::npos && scenario_dot > 0 && key_dot > scenario_dot + 1 && key_dot + 1 < key.size(),
        "{}: key '{}' is not of the form model.Scenario.key", origin, key);
    const std::string scenario = key.substr(scenario_dot + 1, key_dot - scenario_dot - 1);
    MOESERVE_CHECK(known_scenario(scenario),
                   "{}: unknown scenario '{}' (expected *, SingleStream, MultiStream, Server or Offline)", origin,
                   scenario);
    MOESERVE_CHECK(is_number(tokens[2]), "{}: value '{}' needs to be an integer or a double", origin, tokens[2]);
    MOESERVE_CHECK(is_finite_number(tokens[2]), "{}: {} = {} is not a finite number", origin, key, tokens[2]);
    conf.entries_[key] = ConfValue{tokens[2], origin, key};
  }
  return conf;
}

ConfFile ConfFile::read(const std::string& path) { return parse(read_text_file(path, kMaxBytes), path); }

const ConfValue* ConfFile::lookup(const std::string& model, const std::string& scenario, const std::string& key) const {
  for (const std::string& candidate :
       {model + "." + scenario + "." + key, "*." + scenario + "." + key, model + ".*." + key, "*.*." + key}) {
    auto it = entries_.find(candidate);
    if (it != entries_.end()) return &it->second;
  }
  return nullptr;
}

uint64_t conf_value_u64(const ConfValue& value, uint64_t multiplier) {
  // strtoull reads "-1" as 2^64 - 1 and saturates past 2^64 with ERANGE.
  MOESERVE_CHECK(!value.text.starts_with('-'), "{}: {} = {} is negative", value.origin, value.key, value.text);
  errno = 0;
  const uint64_t v = std::strtoull(value.text.c_str(), nullptr, 0);
  MOESERVE_CHECK(errno != ERANGE && (multiplier == 0 || v <= UINT64_MAX / multiplier),
                 "{}: {} = {} is out of range (at most {} in its unit)", value.origin, value.key, value.text,
                 multiplier == 0 ? UINT64_MAX : UINT64_MAX / multiplier);
  return v * multiplier;
}

double conf_value_f64(const ConfValue& value, double multiplier) {
  const double v = std::strtod(value.text.c_str(), nullptr) * multiplier;
  MOESERVE_CHECK(std::isfinite(v), "{}: {} = {} is out of range", value.origin, value.key, value.text);
  return v;
}

}  // namespace moeserve::bench

// LoadGen's configuration files (mlperf.conf, user.conf, audit.config): lines of `model.Scenario.key = value`,
// where model or Scenario may be `*`, and `#` starts a comment. The value must read as an integer or a double.
//
// LoadGen (test_settings_internal.cc, TestSettings::FromConfig) logs a bad line and carries on with the rest; we
// refuse it instead, naming file:line. LoadGen also silently ignores `key=value` written without spaces around
// `=`, which would quietly drop a setting; we refuse that too.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace moeserve::bench {

struct ConfValue {
  std::string text;    // the value as written
  std::string origin;  // "file:line"
  std::string key;     // model.Scenario.key as written
};

class ConfFile {
 public:
  // Parses conf text; `source` names it in errors and origins (a path, or "built-in mlperf.conf").
  static ConfFile parse(const std::string& text, const std::string& source);
  // A file of at most kMaxBytes (LoadGen's mlperf.conf is 10 KiB): a larger one, /dev/zero or an endless FIFO
  // is an error naming the file and the limit.
  static ConfFile read(const std::string& path);
  static constexpr uint64_t kMaxBytes = uint64_t{1} << 20;

  // LoadGen's lookup order: model.scenario.key, then *.scenario.key, then model.*.key, then *.*.key.
  const ConfValue* lookup(const std::string& model, const std::string& scenario, const std::string& key) const;

  // Every key as written (model.scenario.key), for checks over the whole file.
  const std::map<std::string, ConfValue>& entries() const { return entries_; }
  const std::string& source() const { return source_; }

 private:
  std::string source_;
  std::map<std::string, ConfValue> entries_;  // a later line with the same key wins, as in LoadGen
};

// strtoull / strtod with base detection, as LoadGen reads values (strtoull("2.5") is 2, as there), times the
// unit `multiplier`. Where LoadGen would wrap or overflow (a negative or too large integer, a product past 64
// bits or past a double) the value is an error naming file:line and the key. Values are finite: parse() refuses
// inf, nan and 1e400.
uint64_t conf_value_u64(const ConfValue& value, uint64_t multiplier = 1);
double conf_value_f64(const ConfValue& value, double multiplier = 1);

}  // namespace moeserve::bench

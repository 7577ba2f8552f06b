// LoadGen's configuration files (mlperf.conf, user.conf, audit.config): lines of `model.Scenario.key = value`,
// where model or Scenario may be `*`, and `#` starts a comment. The value must read as an integer or a double.
//
// LoadGen (test_settings_internal.cc, TestSettings::FromConfig) logs a bad line and carries on with the rest; we
// refuse it instead, naming file:line. LoadGen also silently ignores `key=value` written without spaces around
// `=`, which would quietly drop a setting; we refuse that too.
#pragma once

#include <map>
#include <optional>
#include <string>

namespace moeserve::bench {

struct ConfValue {
  std::string text;    // the value as written
  std::string origin;  // "file:line"
};

class ConfFile {
 public:
  // Parses conf text; `source` names it in errors and origins (a path, or "built-in mlperf.conf").
  static ConfFile parse(const std::string& text, const std::string& source);
  static ConfFile read(const std::string& path);

  // LoadGen's lookup order: model.scenario.key, then *.scenario.key, then model.*.key, then *.*.key.
  const ConfValue* lookup(const std::string& model, const std::string& scenario, const std::string& key) const;

  // Every key as written (model.scenario.key), for checks over the whole file.
  const std::map<std::string, ConfValue>& entries() const { return entries_; }
  const std::string& source() const { return source_; }

 private:
  std::string source_;
  std::map<std::string, ConfValue> entries_;  // a later line with the same key wins, as in LoadGen
};

// strtoull / strtod with base detection, as LoadGen reads values (strtoull("2.5") is 2, as there).
uint64_t conf_value_u64(const ConfValue& value);
double conf_value_f64(const ConfValue& value);

}  // namespace moeserve::bench

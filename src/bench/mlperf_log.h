// Writers for LoadGen's two machine-read files, in LoadGen's exact layout (logging.cc / logging.h, 6.0.17):
//   mlperf_log_detail.txt   one ":::MLLOG {json}" line per event (the submission checker parses these);
//   mlperf_log_accuracy.json  [{ "seq_id" : .., "qsl_idx" : .., "data" : "<hex>", ["token_data" : "<hex>",]
//                             "token_count" : .. }, ...], data being the response bytes in upper-case hex
//                             (our responses: int32 little-endian token ids, as the MLPerf LLM harnesses send;
//                             eval/accuracy_log.h encodes and reads them).
#pragma once

#include <chrono>
#include <cstdint>
#include <fstream>
#include <mutex>
#include <span>
#include <string>
#include <vector>

namespace moeserve::bench {

// Where a log call was made, as LoadGen's metadata records it ("file", "line_no"). std::source_location would do,
// but clang 14 with libstdc++ 12 (the fuzz build's toolchain) lacks it; gcc and clang both have these builtins,
// which, used as default arguments, take the caller's file and line.
struct CallSite {
  const char* file;
  unsigned line;
  static constexpr CallSite here(const char* file = __builtin_FILE(), unsigned line = __builtin_LINE()) {
    return {file, line};
  }
};

class DetailLog {
 public:
  // `origin` is time 0 of "time_ms".
  DetailLog(const std::string& path, std::chrono::steady_clock::time_point origin);

  // One event; `value` is written as LoadGen writes it: strings quoted, bools true/false, doubles as an ostream
  // prints them (6 significant digits), lists of integers as [..].
  void log(const std::string& key, const std::string& value,
           CallSite where = CallSite::here());
  void log(const std::string& key, const char* value, CallSite where = CallSite::here());
  void log(const std::string& key, bool value, CallSite where = CallSite::here());
  void log(const std::string& key, int64_t value, CallSite where = CallSite::here());
  void log(const std::string& key, uint64_t value, CallSite where = CallSite::here());
  void log(const std::string& key, double value, CallSite where = CallSite::here());
  void log(const std::string& key, const std::vector<uint64_t>& value,
           CallSite where = CallSite::here());
  // Errors and warnings are flagged in the metadata and counted for the summary's last lines.
  void error(const std::string& key, const std::string& message,
             CallSite where = CallSite::here());
  void warning(const std::string& key, const std::string& message,
               CallSite where = CallSite::here());

  int error_count() const { return errors_; }
  int warning_count() const { return warnings_; }

 private:
  void write(const std::string& key, const std::string& value_json, bool is_error, bool is_warning,
             const CallSite& where);

  std::mutex mutex_;
  std::ofstream out_;
  std::string path_;
  std::chrono::steady_clock::time_point origin_;
  int errors_ = 0;
  int warnings_ = 0;
};

class AccuracyLog {
 public:
  // LoadGen adds "token_count" when token latencies are used, and "token_data" (the first-token response) when
  // they are and the scenario is not Offline.
  AccuracyLog(const std::string& path, bool use_token_latencies, bool needs_first_token);
  ~AccuracyLog();

  void add(uint64_t seq_id, uint64_t qsl_idx, std::span<const int32_t> data, std::span<const int32_t> token_data,
           int64_t token_count);
  // Writes the closing bracket; the destructor does it too.
  void close();

 private:
  std::mutex mutex_;
  std::ofstream out_;
  std::string path_;
  bool with_token_count_;
  bool with_token_data_;
  bool needs_comma_ = false;
  bool closed_ = false;
};

}  // namespace moeserve::bench

#include "bench/mlperf_log.h"

#include <fmt/format.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "eval/accuracy_log.h"
#include "util/error.h"

namespace moeserve::bench {
namespace {

std::string ostream_double(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

std::string base_name(const char* path) {
  std::string p(path);
  const size_t slash = p.rfind('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

}  // namespace

DetailLog::DetailLog(const std::string& path, std::chrono::steady_clock::time_point origin)
    : out_(path), path_(path), origin_(origin) {
  MOESERVE_CHECK(out_.good(), "cannot write {}", path);
}

void DetailLog::write(const std::string& key, const std::string& value_json, bool is_error, bool is_warning,
                      const CallSite& where) {
  const auto ns = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - origin_).count());
  std::lock_guard lock(mutex_);
  errors_ += is_error;
  warnings_ += is_warning;
  out_ << ":::MLLOG {\"key\": " << nlohmann::json(key).dump() << ", \"value\": " << value_json
       << ", \"time_ms\": " << fmt::format("{}.{:06}", ns / 1000000, ns % 1000000)
       << ", \"namespace\": \"mlperf::logging\", \"event_type\": \"POINT_IN_TIME\", \"metadata\": {\"is_error\": "
       << (is_error ? "true" : "false") << ", \"is_warning\": " << (is_warning ? "true" : "false") << ", \"file\": \""
       << base_name(where.file) << "\", \"line_no\": " << where.line << ", \"pid\": " << ::getpid()
       << ", \"tid\": " << ::syscall(SYS_gettid) << "}}\n";
  if (is_error) out_.flush();
  MOESERVE_CHECK(out_.good(), "writing {} failed", path_);
}

void DetailLog::log(const std::string& key, const std::string& value, CallSite where) {
  write(key, nlohmann::json(value).dump(), false, false, where);
}
void DetailLog::log(const std::string& key, const char* value, CallSite where) {
  write(key, nlohmann::json(value).dump(), false, false, where);
}
void DetailLog::log(const std::string& key, bool value, CallSite where) {
  write(key, value ? "true" : "false", false, false, where);
}
void DetailLog::log(const std::string& key, int64_t value, CallSite where) {
  write(key, std::to_string(value), false, false, where);
}
void DetailLog::log(const std::string& key, uint64_t value, CallSite where) {
  write(key, std::to_string(value), false, false, where);
}
void DetailLog::log(const std::string& key, double value, CallSite where) {
  // LoadGen prints doubles through an ostream; JSON has no inf or nan, which LoadGen writes as Infinity/NaN.
  write(key, ostream_double(value), false, false, where);
}
void DetailLog::log(const std::string& key, const std::vector<uint64_t>& value, CallSite where) {
  write(key, nlohmann::json(value).dump(), false, false, where);
}
void DetailLog::error(const std::string& key, const std::string& message, CallSite where) {
  write(key, nlohmann::json(message).dump(), true, false, where);
}
void DetailLog::warning(const std::string& key, const std::string& message, CallSite where) {
  write(key, nlohmann::json(message).dump(), false, true, where);
}

AccuracyLog::AccuracyLog(const std::string& path, bool use_token_latencies, bool needs_first_token)
    : out_(path),
      path_(path),
      with_token_count_(use_token_latencies),
      with_token_data_(use_token_latencies && needs_first_token) {
  MOESERVE_CHECK(out_.good(), "cannot write {}", path);
  out_ << "[";
}

AccuracyLog::~AccuracyLog() { close(); }

void AccuracyLog::add(uint64_t seq_id, uint64_t qsl_idx, std::span<const int32_t> data,
                      std::span<const int32_t> token_data, int64_t token_count) {
  std::lock_guard lock(mutex_);
  out_ << (needs_comma_ ? ",\n{ " : "\n{ ") << "\"seq_id\" : " << seq_id << ", \"qsl_idx\" : " << qsl_idx
       << ", \"data\" : \"" << eval::int32_to_hex(data) << "\"";
  if (with_token_data_) out_ << ", \"token_data\" : \"" << eval::int32_to_hex(token_data) << "\"";
  if (with_token_count_) out_ << ", \"token_count\" : " << token_count;
  out_ << " }";
  needs_comma_ = true;
  MOESERVE_CHECK(out_.good(), "writing {} failed", path_);
}

void AccuracyLog::close() {
  std::lock_guard lock(mutex_);
  if (closed_) return;
  closed_ = true;
  out_ << "\n]\n";
  out_.close();
}

}  // namespace moeserve::bench

#include "util/log.h"

#include <atomic>
#include <cstdio>

#include "util/error.h"

namespace moeserve {

namespace {
std::atomic<LogLevel> g_level{LogLevel::info};
}  // namespace

LogLevel parse_log_level(const std::string& name) {
  if (name == "debug") return LogLevel::debug;
  if (name == "info") return LogLevel::info;
  if (name == "warning" || name == "warn") return LogLevel::warning;
  if (name == "error") return LogLevel::error;
  fail("log level \"{}\" is not one of debug, info, warning, error", name);
}

void set_log_level(LogLevel level) { g_level = level; }

bool log_enabled(LogLevel level) { return level >= g_level.load(); }

void log_line(LogLevel level, std::string_view text) {
  const std::string line = fmt::format("moeserve: {}{}\n", level == LogLevel::warning ? "warning: " : "", text);
  std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace moeserve

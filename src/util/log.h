// Leveled lines on stderr, for the long-running commands (serve): "moeserve: <text>", shown when the level is at
// or above --log-level (vLLM's and uvicorn's names: debug, info, warning, error; default info). One line is
// written whole, so lines from several threads do not interleave.
#pragma once

#include <fmt/format.h>

#include <string>
#include <string_view>

namespace moeserve {

enum class LogLevel { debug, info, warning, error };

// "debug", "info", "warning" (or "warn"), "error"; an Error naming the text otherwise.
LogLevel parse_log_level(const std::string& name);
void set_log_level(LogLevel level);
bool log_enabled(LogLevel level);
void log_line(LogLevel level, std::string_view text);

template <typename... Args>
void log_info(fmt::format_string<Args...> format, Args&&... args) {
  if (log_enabled(LogLevel::info)) log_line(LogLevel::info, fmt::format(format, std::forward<Args>(args)...));
}

template <typename... Args>
void log_warning(fmt::format_string<Args...> format, Args&&... args) {
  if (log_enabled(LogLevel::warning)) log_line(LogLevel::warning, fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace moeserve

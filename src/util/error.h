// Errors that carry their context (file, tensor, request id) and propagate to the command line,
// which prints them and exits non-zero. No silent fallbacks.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace moeserve {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

// Checks an invariant of the input (not of the program): a failed check is a user-facing error.
#define MOESERVE_CHECK(condition, ...)                 \
  do {                                                 \
    if (!(condition)) ::moeserve::fail(__VA_ARGS__);   \
  } while (false)

}  // namespace moeserve

// The message of the Error a call raises, as such and in a child process whose address space is capped
// (RLIMIT_AS), so that a test can show a size is refused before anything is allocated for it: under the cap, an
// unchecked allocation of gigabytes fails with bad_alloc instead of the loader's error.
#pragma once

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <functional>
#include <new>
#include <string>

#include "util/error.h"

namespace moeserve::testing {

// The message of the moeserve::Error `f` throws ("" when it throws none).
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// The message of the moeserve::Error that `f` throws in a child process limited to its current address space
// plus `headroom_bytes`; "" when it throws none, "out of memory" when an allocation fails first, "crashed" when
// the child dies.
inline std::string error_under_memory_limit(const std::function<void()>& f, uint64_t headroom_bytes = 256 << 20) {
  int fds[2];
  if (::pipe(fds) != 0) return "pipe failed";
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    uint64_t pages = 0;
    std::ifstream("/proc/self/statm") >> pages;
    const auto limit = static_cast<rlim_t>(pages * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE)) + headroom_bytes);
    const rlimit cap{limit, limit};
    std::string message;
    if (::setrlimit(RLIMIT_AS, &cap) != 0) {
      message = "setrlimit failed";
    } else {
      try {
        f();
      } catch (const Error& e) {
        message = e.what();
      } catch (const std::bad_alloc&) {
        message = "out of memory";
      }
    }
    const ssize_t written = ::write(fds[1], message.data(), message.size());
    ::_exit(written == static_cast<ssize_t>(message.size()) ? 0 : 1);
  }
  ::close(fds[1]);
  std::string message;
  char buffer[4096];
  for (ssize_t n; (n = ::read(fds[0], buffer, sizeof buffer)) > 0;) message.append(buffer, static_cast<size_t>(n));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? message : "crashed";
}

}  // namespace moeserve::testing

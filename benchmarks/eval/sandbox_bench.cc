// Per-run cost of the code sandbox (src/eval/sandbox.h): the wall-clock time of one run of a trivial program, in
// each isolation mode this machine allows, against the same program started without the sandbox.
// Usage: sandbox_bench [--runs N] [--program PATH [ARGS...]]   (default: 50 runs of /usr/bin/python3 -c pass)
// Prints the median and the 90th percentile per mode, and the median's excess over the unsandboxed start.
#include <fmt/core.h>
#include <spawn.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "eval/sandbox.h"
#include "util/error.h"

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;

struct Timing {
  double median_ms = 0;
  double p90_ms = 0;
};

template <typename Run>
Timing time_runs(int runs, const Run& run) {
  std::vector<double> ms;
  for (int i = 0; i < runs; ++i) {
    const Clock::time_point start = Clock::now();
    run();
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
  }
  std::sort(ms.begin(), ms.end());
  return {ms[ms.size() / 2], ms[std::min(ms.size() - 1, ms.size() * 9 / 10)]};
}

void run_directly(const std::vector<std::string>& argv) {
  std::vector<char*> pointers;
  for (const std::string& a : argv) pointers.push_back(const_cast<char*>(a.c_str()));
  pointers.push_back(nullptr);
  pid_t pid = 0;
  MOESERVE_CHECK(::posix_spawn(&pid, pointers[0], nullptr, nullptr, pointers.data(), environ) == 0,
                 "posix_spawn {} failed", argv[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace moeserve;
  using namespace moeserve::eval;
  try {
    int runs = 50;
    std::vector<std::string> program = {"/usr/bin/python3", "-c", "pass"};
    for (int i = 1; i < argc; ++i) {
      const std::string arg = argv[i];
      MOESERVE_CHECK(i + 1 < argc, "{} needs a value", arg);
      if (arg == "--runs") {
        runs = std::max(1, std::stoi(argv[++i]));
      } else if (arg == "--program") {
        program.assign(argv + i + 1, argv + argc);
        break;
      } else {
        fail("unknown argument {}", arg);
      }
    }
    const Timing direct = time_runs(runs, [&] { run_directly(program); });
    fmt::print("{:<16} median {:7.2f} ms  p90 {:7.2f} ms\n", "unsandboxed", direct.median_ms, direct.p90_ms);
    for (Isolation mode : {Isolation::namespaces, Isolation::root_namespaces, Isolation::processes_only}) {
      SandboxOptions options;
      options.strongest = mode;
      const Sandbox sandbox(options);
      if (sandbox.isolation() != mode) {
        fmt::print("{:<16} not available here\n", isolation_name(mode));
        continue;
      }
      SandboxRequest request;
      request.argv = program;
      const Timing t = time_runs(runs, [&] {
        const SandboxResult result = sandbox.run(request);
        MOESERVE_CHECK(result.end == SandboxResult::End::exited && result.exit_code == 0, "{} run failed: {} {}",
                       isolation_name(mode), result.setup_error, result.stderr_text);
      });
      fmt::print("{:<16} median {:7.2f} ms  p90 {:7.2f} ms  (+{:.2f} ms)\n", isolation_name(mode), t.median_ms,
                 t.p90_ms, t.median_ms - direct.median_ms);
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "sandbox_bench: {}\n", e.what());
    return 1;
  }
}

// What the sandbox tests share: a fixture per isolation mode that runs Python programs and checks that no
// process of a run outlives it, a host process to attack, and the names of the modes.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "eval/sandbox.h"
#include "test_util.h"

namespace moeserve::eval::sandbox_testing {

inline constexpr const char* kPython = "/usr/bin/python3";

// The file's bytes, or what was read of them before an error: a process may exit between the listing of /proc and
// the read of its files, which then fails with ESRCH (std::ifstream's iterators turned that into an exception, which
// failed ConcurrentRunsDoNotShareTheProcessLimit once in CI while other processes on the machine came and went).
inline std::string read_proc_file(const std::filesystem::path& path) {
  std::string bytes;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return bytes;
  char buffer[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n <= 0) break;
    bytes.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  return bytes;
}

// A marker unique to one run, put into the program's command line: every process the program forks inherits
// it, so /proc shows whether any is left.
inline std::string new_marker() {
  static std::atomic<int> counter{0};
  return "moeserve-sandbox-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
}

// Host processes of runs made under temp_root: their working directory lies under it (processes-only), their
// root is a sandbox root made there (the namespace modes, whose processes see other paths; the root lives as
// long as the Sandbox that made it), or their command line holds the marker (inherited by every process a
// run's program forks, whatever directory it moves to).
inline int processes_of_runs(const std::string& temp_root, const std::string& marker = {}) {
  std::vector<std::pair<dev_t, ino_t>> roots;
  for (const auto& entry : std::filesystem::directory_iterator(temp_root)) {
    struct stat info {};
    if (entry.path().filename().string().starts_with("moeserve-sandbox-root-") &&
        ::stat(entry.path().c_str(), &info) == 0) {
      roots.emplace_back(info.st_dev, info.st_ino);
    }
  }
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.empty() || !std::isdigit(static_cast<unsigned char>(name[0]))) continue;
    std::error_code error;
    const std::string cwd = std::filesystem::read_symlink(entry.path() / "cwd", error).string();
    struct stat root {};
    const bool in_root = ::stat((entry.path() / "root").c_str(), &root) == 0 &&
                         std::find(roots.begin(), roots.end(), std::make_pair(root.st_dev, root.st_ino)) != roots.end();
    const bool marked = !marker.empty() && read_proc_file(entry.path() / "cmdline").find(marker) != std::string::npos;
    if ((!error && cwd.starts_with(temp_root + "/")) || in_root || marked) ++count;
  }
  return count;
}

// A host process outside the sandbox with a secret in its command line and environment, for the program to
// look for, trace and signal.
class HostSleeper {
 public:
  HostSleeper() : secret_("moeserve-secret-" + std::to_string(::getpid()) + "-" + std::to_string(::time(nullptr))) {
    const std::string code = "import time\ntime.sleep(120)";
    const std::string env = "MOESERVE_TEST_SECRET=" + secret_;
    char* argv[] = {const_cast<char*>(kPython), const_cast<char*>("-c"), const_cast<char*>(code.c_str()),
                    const_cast<char*>(secret_.c_str()), nullptr};
    char* envp[] = {const_cast<char*>(env.c_str()), nullptr};
    if (::posix_spawn(&pid_, kPython, nullptr, nullptr, argv, envp) != 0) pid_ = -1;
  }
  ~HostSleeper() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  HostSleeper(const HostSleeper&) = delete;
  HostSleeper& operator=(const HostSleeper&) = delete;

  pid_t pid() const { return pid_; }
  const std::string& secret() const { return secret_; }
  bool alive() const { return pid_ > 0 && ::waitpid(pid_, nullptr, WNOHANG) == 0; }
  // The pid of the process tracing it (0: none), from /proc/PID/status.
  std::string tracer() const {
    const std::string status = read_proc_file("/proc/" + std::to_string(pid_) + "/status");
    const size_t at = status.find("TracerPid:");
    if (at == std::string::npos) return "?";
    const size_t begin = status.find_first_not_of(" \t", at + 10);
    return status.substr(begin, status.find('\n', begin) - begin);
  }

 private:
  std::string secret_;
  pid_t pid_ = -1;
};

struct Outcome {
  SandboxResult result;
  std::string marker;
};

inline SandboxLimits short_limits(double seconds) {
  SandboxLimits limits;
  limits.wall_seconds = seconds;
  limits.cpu_seconds = seconds;
  limits.memory_bytes = 512ull << 20;
  return limits;
}

class SandboxTest : public ::testing::TestWithParam<Isolation> {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(kPython)) GTEST_SKIP() << kPython << " is not installed";
    temp_root_ = moeserve::testing::temp_dir("sandbox-runs");
    ::chmod(temp_root_.c_str(), 0755);  // the program (another uid) reaches its directory through here
    SandboxOptions options;
    options.temp_root = temp_root_;
    options.strongest = GetParam();
    sandbox_ = std::make_unique<Sandbox>(options);
    if (sandbox_->isolation() != GetParam()) {
      GTEST_SKIP() << "this machine does not allow " << isolation_name(GetParam()) << " isolation";
    }
  }

  // Runs code under python3 -c with args after it; checks that nothing of the run is left.
  Outcome run_python(const std::string& code, SandboxLimits limits = {}, const std::vector<std::string>& args = {}) {
    Outcome run = run_python_among_others(code, limits, args);
    EXPECT_EQ(processes_of_runs(temp_root_, run.marker), 0) << "a process of the run outlived it";
    return run;
  }
  // The same without the check, for runs alongside others of this sandbox (their processes share its root):
  // check once all have ended.
  Outcome run_python_among_others(const std::string& code, SandboxLimits limits = {},
                                  const std::vector<std::string>& args = {}) {
    Outcome run;
    run.marker = new_marker();
    SandboxRequest request;
    request.argv = {kPython, "-c", "# " + run.marker + "\n" + code};
    request.argv.insert(request.argv.end(), args.begin(), args.end());
    request.limits = limits;
    run.result = sandbox_->run(request);
    return run;
  }

  bool root() const { return ::geteuid() == 0; }
  bool has_namespaces() const { return GetParam() != Isolation::processes_only; }
  bool exposes(Exposure exposure) const {
    const std::vector<Exposure> all = sandbox_->exposures();
    return std::find(all.begin(), all.end(), exposure) != all.end();
  }

  std::string temp_root_;
  std::unique_ptr<Sandbox> sandbox_;
};

inline std::string mode_test_name(const ::testing::TestParamInfo<Isolation>& info) {
  std::string name(isolation_name(info.param));
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

}  // namespace moeserve::eval::sandbox_testing

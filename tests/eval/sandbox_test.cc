// The sandbox against real attacks: each must end in a clean failure within its limits, with no process of it
// left running. Safe for the machine even if the sandbox failed: the fork bomb is bounded by its own loop
// count, the allocation by RLIMIT_AS and then by a small total, the write targets are test directories, and the
// network target is a listener the test itself opens on the loopback interface.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <iostream>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "eval/sandbox.h"
#include "test_util.h"

namespace moeserve::eval {
namespace {

constexpr const char* kPython = "/usr/bin/python3";

// A marker unique to one run, put into the program's command line: every process the program forks inherits
// it, so /proc shows whether any is left.
std::string new_marker() {
  static std::atomic<int> counter{0};
  return "moeserve-sandbox-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
}

int processes_with(const std::string& marker) {
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.empty() || !std::isdigit(static_cast<unsigned char>(name[0]))) continue;
    std::ifstream in(entry.path() / "cmdline", std::ios::binary);
    std::string cmdline((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (cmdline.find(marker) != std::string::npos) ++count;
  }
  return count;
}

struct Outcome {
  SandboxResult result;
  std::string marker;
};

class SandboxTest : public ::testing::TestWithParam<Isolation> {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(kPython)) GTEST_SKIP() << kPython << " is not installed";
    sandbox_ = std::make_unique<Sandbox>(SandboxOptions{"", GetParam()});
    if (sandbox_->isolation() != GetParam()) {
      GTEST_SKIP() << "this machine does not allow " << isolation_name(GetParam()) << " isolation";
    }
  }

  Outcome run_python(const std::string& code, SandboxLimits limits = {}) {
    Outcome run;
    run.marker = new_marker();
    SandboxRequest request;
    request.argv = {kPython, "-c", "# " + run.marker + "\n" + code};
    request.limits = limits;
    run.result = sandbox_->run(request);
    EXPECT_EQ(processes_with(run.marker), 0) << "a process of the run outlived it";
    return run;
  }

  bool root() const { return ::geteuid() == 0; }
  bool has_namespaces() const { return GetParam() != Isolation::processes_only; }

  std::unique_ptr<Sandbox> sandbox_;
};

SandboxLimits short_limits(double seconds) {
  SandboxLimits limits;
  limits.wall_seconds = seconds;
  limits.cpu_seconds = seconds;
  limits.memory_bytes = 512ull << 20;
  return limits;
}

TEST_P(SandboxTest, RunsAProgramWithACleanEnvironment) {
  const Outcome run = run_python("import os, sys\nprint(sorted(os.environ))\nprint(os.getcwd().endswith('/work'))\n"
                             "print(open('../note.txt').read() if False else 'ok')\nsys.exit(3)");
  EXPECT_EQ(run.result.end, SandboxResult::End::exited) << run.result.setup_error << run.result.stderr_text;
  EXPECT_EQ(run.result.exit_code, 3);
  EXPECT_EQ(run.result.stdout_text, "['LANG', 'PATH', 'PYTHONDONTWRITEBYTECODE']\nTrue\nok\n");
}

TEST_P(SandboxTest, ProvidesFilesAndAWritableWorkDirectory) {
  SandboxRequest request;
  request.argv = {kPython, "-c",
                  "open('scratch.txt', 'w').write('x' * 10)\nprint(open('../input.txt').read(), "
                  "open('scratch.txt').read())"};
  request.files = {{"input.txt", "given"}};
  const SandboxResult result = sandbox_->run(request);
  EXPECT_EQ(result.end, SandboxResult::End::exited) << result.stderr_text;
  EXPECT_EQ(result.stdout_text, "given xxxxxxxxxx\n");
}

TEST_P(SandboxTest, RunsAsAnUnprivilegedUidOfItsOwnWhenStartedAsRoot) {
  if (!root()) GTEST_SKIP() << "only root changes the program's uid";
  const Outcome run = run_python("import os\nprint(os.getuid(), os.getgid(), os.getgroups())");
  ASSERT_EQ(run.result.end, SandboxResult::End::exited) << run.result.stderr_text;
  if (GetParam() == Isolation::namespaces) {
    EXPECT_EQ(run.result.stdout_text, "65534 65534 []\n");  // its host uid is hidden behind the user namespace
    return;
  }
  std::istringstream fields(run.result.stdout_text);
  uint64_t uid = 0, gid = 0;
  std::string groups;
  fields >> uid >> gid >> groups;
  EXPECT_GE(uid, 2'000'000'000u);
  EXPECT_LT(uid, 2'000'000'000u + (1u << 24));
  EXPECT_EQ(gid, 65534u);
  EXPECT_EQ(groups, "[]");
}

TEST_P(SandboxTest, ConcurrentRunsDoNotShareTheProcessLimit) {
  // Four runs at once, each holding 5 sleeping children (6 processes) under a limit of 8 per run: with one
  // process budget for all of them most forks would fail.
  if (!root()) GTEST_SKIP() << "a non-root evaluator's runs share its uid and so its process count";
  SandboxLimits limits = short_limits(20);
  limits.max_processes = 8;
  const std::string code =
      "import os, sys, time\nmade = 0\nfor i in range(5):\n    try:\n        if os.fork() == 0:\n"
      "            time.sleep(3)\n            os._exit(0)\n        made += 1\n    except OSError:\n"
      "        pass\nprint(made)\nsys.stdout.flush()\ntime.sleep(3)";
  std::vector<std::thread> threads;
  std::vector<Outcome> runs(4);
  for (Outcome& run : runs) threads.emplace_back([&] { run = run_python(code, limits); });
  for (std::thread& thread : threads) thread.join();
  for (const Outcome& run : runs) {
    EXPECT_EQ(run.result.end, SandboxResult::End::exited) << run.result.stderr_text;
    EXPECT_EQ(run.result.stdout_text, "5\n");
  }
}

TEST_P(SandboxTest, InfiniteLoopIsKilledWithinItsLimit) {
  const auto start = std::chrono::steady_clock::now();
  const Outcome run = run_python("while True:\n    pass", short_limits(2));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_TRUE(run.result.end == SandboxResult::End::signaled || run.result.end == SandboxResult::End::timed_out)
      << end_name(run.result.end);
  EXPECT_LT(seconds, 5.0);
}

TEST_P(SandboxTest, ForkBombIsContainedAndCleanedUp) {
  // Up to 2^10 processes if nothing stopped it; each then sleeps well past the deadline.
  const auto start = std::chrono::steady_clock::now();
  const Outcome run = run_python(
      "import os, time\nmade = 0\nfor i in range(10):\n    try:\n        os.fork()\n        made += 1\n"
      "    except OSError:\n        pass\ntime.sleep(60)",
      short_limits(2));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(run.result.end, SandboxResult::End::timed_out) << end_name(run.result.end);
  EXPECT_LT(seconds, 5.0);
}

TEST_P(SandboxTest, ProcessCountIsLimited) {
  SandboxLimits limits = short_limits(10);
  limits.max_processes = 8;
  const Outcome run = run_python(
      "import os, time\nmade = 0\nfor i in range(40):\n    try:\n        if os.fork() == 0:\n"
      "            time.sleep(60)\n            os._exit(0)\n        made += 1\n    except OSError:\n"
      "        pass\nprint(made)",
      limits);
  ASSERT_EQ(run.result.end, SandboxResult::End::exited) << run.result.stderr_text;
  const int made = std::stoi(run.result.stdout_text);
  EXPECT_LT(made, 8);
  // A non-root evaluator's count includes its own other processes; root's runs each have a uid of their own.
  if (has_namespaces() || root()) {
    EXPECT_GT(made, 0);
  }
}

TEST_P(SandboxTest, DaemonsDoNotOutliveTheRun) {
  // The program leaves a double-forked child in its own session and exits at once.
  const Outcome run = run_python(
      "import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        time.sleep(60)\n"
      "    os._exit(0)\nprint('parent done')",
      short_limits(10));
  EXPECT_EQ(run.result.end, SandboxResult::End::exited);
  EXPECT_EQ(run.result.stdout_text, "parent done\n");
}

TEST_P(SandboxTest, HugeAllocationFails) {
  const Outcome once = run_python("b = bytearray(8 << 30)\nprint('allocated')", short_limits(10));
  EXPECT_EQ(once.result.end, SandboxResult::End::exited);
  EXPECT_NE(once.result.exit_code, 0);
  EXPECT_NE(once.result.stderr_text.find("MemoryError"), std::string::npos) << once.result.stderr_text;
  // Growing in steps stops at the limit too (at most 64 x 16 MiB if it did not).
  const Outcome steps = run_python("x = []\nfor i in range(64):\n    x.append(bytearray(16 << 20))\nprint('allocated')",
                               short_limits(10));
  EXPECT_NE(steps.result.exit_code, 0);
  EXPECT_EQ(steps.result.stdout_text, "");
}

TEST_P(SandboxTest, CannotWriteOutsideItsDirectory) {
  const std::string owned = moeserve::testing::temp_dir("sandbox-private");  // root's, mode 0700
  const std::string shared = moeserve::testing::temp_dir("sandbox-shared");
  ::chmod(shared.c_str(), 01777);  // like /tmp: anyone may write
  SandboxRequest request;
  request.argv = {kPython, "-c", "# " + new_marker() +
                                     "\nimport sys\nfor path in sys.argv[1:]:\n    try:\n        open(path, 'w')"
                                     ".write('escaped')\n        print('wrote')\n    except OSError:\n"
                                     "        print('blocked')\nopen('inside.txt', 'w').write('fine')\n"
                                     "print('inside ok')",
                  owned + "/escaped.txt", shared + "/escaped.txt"};
  request.limits = short_limits(10);
  const SandboxResult result = sandbox_->run(request);
  ASSERT_EQ(result.end, SandboxResult::End::exited) << result.setup_error << result.stderr_text;
  if (root()) {
    EXPECT_FALSE(std::filesystem::exists(owned + "/escaped.txt"));
  }
  if (has_namespaces()) {
    EXPECT_FALSE(std::filesystem::exists(shared + "/escaped.txt"));  // every mount is read-only
  }
  EXPECT_NE(result.stdout_text.find("inside ok"), std::string::npos) << result.stdout_text;
}

TEST_P(SandboxTest, CannotConnectToTheNetwork) {
  if (!has_namespaces()) GTEST_SKIP() << "processes-only isolation has no network namespace";
  const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  ASSERT_GE(listener, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  ASSERT_EQ(::listen(listener, 4), 0);
  socklen_t length = sizeof(address);
  ::getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length);
  const int port = ntohs(address.sin_port);
  const Outcome run = run_python("import socket\ntry:\n    socket.create_connection(('127.0.0.1', " + std::to_string(port) +
                                 "), timeout=2)\n    print('connected')\nexcept OSError as e:\n"
                                 "    print('blocked', e.errno)\n    raise SystemExit(1)",
                             short_limits(10));
  EXPECT_EQ(run.result.end, SandboxResult::End::exited);
  EXPECT_EQ(run.result.exit_code, 1);
  EXPECT_EQ(run.result.stdout_text.rfind("blocked", 0), 0u) << run.result.stdout_text;
  EXPECT_LT(::accept(listener, nullptr, nullptr), 0) << "the sandbox reached the host's loopback";
  ::close(listener);
}

TEST_P(SandboxTest, LineHandlerCanStopTheRun) {
  SandboxRequest request;
  const std::string marker = new_marker();
  request.argv = {kPython, "-c", "# " + marker + "\nimport time\nprint('first', flush=True)\ntime.sleep(60)"};
  request.limits = short_limits(30);
  std::vector<std::string> lines;
  const SandboxResult result = sandbox_->run(request, [&](std::string_view line) {
    lines.emplace_back(line);
    return false;
  });
  EXPECT_EQ(result.end, SandboxResult::End::stopped);
  EXPECT_EQ(lines, std::vector<std::string>{"first"});
  EXPECT_LT(result.wall_seconds, 10);
  EXPECT_EQ(processes_with(marker), 0);
}

TEST_P(SandboxTest, AThrowingLineHandlerStillCleansUp) {
  SandboxRequest request;
  const std::string marker = new_marker();
  request.argv = {kPython, "-c", "# " + marker + "\nimport time\nprint('first', flush=True)\ntime.sleep(60)"};
  request.limits = short_limits(30);
  EXPECT_THROW(sandbox_->run(request, [](std::string_view) -> bool { throw std::runtime_error("handler"); }),
               std::runtime_error);
  EXPECT_EQ(processes_with(marker), 0);
}

TEST_P(SandboxTest, OutputBeyondTheLimitStopsTheRun) {
  SandboxLimits limits = short_limits(20);
  limits.max_stdout_bytes = 1 << 20;
  const Outcome run = run_python("import sys\nwhile True:\n    sys.stdout.write('x' * 65536)", limits);
  EXPECT_EQ(run.result.end, SandboxResult::End::output_limit);
  EXPECT_EQ(run.result.stdout_text.size(), 1u << 20);
}

TEST_P(SandboxTest, BigFilesAreRefused) {
  SandboxLimits limits = short_limits(10);
  limits.file_size_bytes = 1 << 20;
  const Outcome run = run_python("open('big', 'wb').write(b'x' * (4 << 20))\nprint('written')", limits);
  EXPECT_NE(run.result.end == SandboxResult::End::exited && run.result.exit_code == 0, true);
  EXPECT_EQ(run.result.stdout_text, "");
}

TEST_P(SandboxTest, MissingProgramFailsToStart) {
  SandboxRequest request;
  request.argv = {"/nonexistent/program"};
  const SandboxResult result = sandbox_->run(request);
  EXPECT_EQ(result.end, SandboxResult::End::failed_to_start);
  EXPECT_NE(result.setup_error.find("execve"), std::string::npos) << result.setup_error;
}

INSTANTIATE_TEST_SUITE_P(Modes, SandboxTest,
                         ::testing::Values(Isolation::namespaces, Isolation::root_namespaces,
                                           Isolation::processes_only),
                         [](const ::testing::TestParamInfo<Isolation>& info) {
                           std::string name(isolation_name(info.param));
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

TEST(Sandbox, ProbesTheStrongestIsolation) {
  const Sandbox sandbox;
  std::cout << "isolation on this machine: " << isolation_name(sandbox.isolation()) << "\n";
  EXPECT_EQ(Sandbox(SandboxOptions{"", Isolation::processes_only}).isolation(), Isolation::processes_only);
}

}  // namespace
}  // namespace moeserve::eval

// The sandbox's own behaviour in each isolation mode: files, environment, uids, limits, stopping, and what it
// reports; programs that try to get out are in sandbox_escape_test.cc. Every limit test is safe for the machine
// even if the limit failed: the allocation is bounded by RLIMIT_AS and then by a small total, forks by a count.
#include <chrono>
#include <iostream>
#include <sstream>
#include <thread>

#include "eval/lcb_runner.h"
#include "eval/sandbox_fixture.h"
#include "util/files.h"

namespace moeserve::eval {
namespace {

using namespace sandbox_testing;

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
  for (Outcome& run : runs) threads.emplace_back([&] { run = run_python_among_others(code, limits); });
  for (std::thread& thread : threads) thread.join();
  for (const Outcome& run : runs) {
    EXPECT_EQ(run.result.end, SandboxResult::End::exited) << run.result.stderr_text;
    EXPECT_EQ(run.result.stdout_text, "5\n");
    EXPECT_EQ(processes_of_runs(temp_root_, run.marker), 0);
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
  EXPECT_EQ(processes_of_runs(temp_root_, marker), 0);
}

TEST_P(SandboxTest, AThrowingLineHandlerStillCleansUp) {
  SandboxRequest request;
  const std::string marker = new_marker();
  request.argv = {kPython, "-c", "# " + marker + "\nimport time\nprint('first', flush=True)\ntime.sleep(60)"};
  request.limits = short_limits(30);
  EXPECT_THROW(sandbox_->run(request, [](std::string_view) -> bool { throw std::runtime_error("handler"); }),
               std::runtime_error);
  EXPECT_EQ(processes_of_runs(temp_root_, marker), 0);
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
                         mode_test_name);

SandboxOptions options_up_to(Isolation strongest) {
  SandboxOptions options;
  options.strongest = strongest;
  return options;
}

TEST(Sandbox, ProbesTheStrongestIsolation) {
  const Sandbox sandbox;
  std::cout << "isolation on this machine: " << sandbox.summary() << "\n";
  EXPECT_EQ(Sandbox(options_up_to(Isolation::processes_only)).isolation(), Isolation::processes_only);
}

TEST(Sandbox, SaysWhatProcessesOnlyCannotKeepOut) {
  const Sandbox weak(options_up_to(Isolation::processes_only));
  std::vector<Exposure> expected = {Exposure::host_processes, Exposure::host_sockets, Exposure::network,
                                    Exposure::shared_directories};
  if (::geteuid() != 0) expected.push_back(Exposure::evaluator_identity);
  EXPECT_EQ(weak.exposures(), expected);
  const std::string summary = weak.summary();
  EXPECT_TRUE(summary.starts_with("processes-only; NOT isolated from: ")) << summary;
  for (Exposure exposure : expected) EXPECT_NE(summary.find(exposure_name(exposure)), std::string::npos) << summary;
  const Sandbox strongest;
  if (strongest.isolation() == Isolation::processes_only) {
    // Why each stronger mode was not had comes first.
    EXPECT_TRUE(strongest.summary().starts_with("processes-only (namespaces: ")) << strongest.summary();
  } else {
    EXPECT_TRUE(strongest.exposures().empty());
    EXPECT_TRUE(strongest.summary().starts_with(isolation_name(strongest.isolation()))) << strongest.summary();
    EXPECT_EQ(strongest.summary().find("NOT isolated"), std::string::npos) << strongest.summary();
  }
}

// A directory with an executable script, for read_only_paths.
std::string script_directory() {
  const std::string directory = moeserve::testing::temp_dir("sandbox-shown");
  ::chmod(directory.c_str(), 0755);
  write_text_file(directory + "/tool.sh",
                  "#!/bin/sh\necho shown\necho changed > \"$0\" 2>/dev/null || echo read-only\n");
  ::chmod((directory + "/tool.sh").c_str(), 0755);
  return directory;
}

TEST(Sandbox, ShowsReadOnlyPathsAtTheirOwnPath) {
  const std::string directory = script_directory();
  SandboxRequest request;
  request.argv = {directory + "/tool.sh"};
  const Sandbox plain;
  if (plain.isolation() == Isolation::processes_only) GTEST_SKIP() << "processes-only isolation shows every path";
  const SandboxResult hidden = plain.run(request);
  EXPECT_EQ(hidden.end, SandboxResult::End::failed_to_start);
  EXPECT_NE(hidden.setup_error.find("the sandbox shows only /usr"), std::string::npos) << hidden.setup_error;
  SandboxOptions options;
  options.read_only_paths = {directory};
  const SandboxResult shown = Sandbox(options).run(request);
  EXPECT_EQ(shown.end, SandboxResult::End::exited) << shown.setup_error << shown.stderr_text;
  EXPECT_EQ(shown.stdout_text, "shown\nread-only\n");
}

TEST(Sandbox, RefusesReadOnlyPathsThatWouldUndoTheIsolation) {
  for (const std::string path : {"/", "/proc", "/proc/self", "/dev", "/usr/.."}) {
    SandboxOptions options;
    options.read_only_paths = {path};
    try {
      Sandbox sandbox(options);
      ADD_FAILURE() << path << " was accepted";
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find("would show the host's"), std::string::npos) << e.what();
    }
  }
  SandboxOptions missing;
  missing.read_only_paths = {"/nonexistent/python"};
  EXPECT_THROW(Sandbox{missing}, std::exception);
}

// LiveCodeBench with a python outside the system directories: a link to the system's one, and a copy of its
// interpreter whose standard library (a link to the system's) is beside it, as a python built under /opt is.
TEST(LcbRunnerPython, RunsAPythonOutsideTheSystemDirectories) {
  if (!std::filesystem::exists("/usr/bin/python3")) GTEST_SKIP() << "/usr/bin/python3 is not installed";
  const std::filesystem::path system_python = std::filesystem::canonical("/usr/bin/python3");
  const std::string installation = moeserve::testing::temp_dir("lcb-python");
  ::chmod(installation.c_str(), 0755);
  std::filesystem::create_directories(installation + "/bin");
  std::filesystem::create_directories(installation + "/lib");
  std::filesystem::copy_file(system_python, installation + "/bin/python3");
  const std::string stdlib = "/usr/lib/" + system_python.filename().string();
  std::filesystem::create_directory_symlink(stdlib, installation + "/lib/" + system_python.filename().string());
  std::filesystem::create_symlink("/usr/bin/python3", installation + "/link-to-python3");
  LcbProblem problem;
  problem.question_id = "sum";
  problem.public_tests = {{"1 2\n", "3\n"}, {"40 2\n", "42\n"}};
  for (const std::string& python : {installation + "/link-to-python3", installation + "/bin/python3"}) {
    LcbRunnerOptions options;
    options.python = python;
    options.timeout_seconds = 10;
    options.memory_bytes = 1ull << 30;
    const LcbVerdict verdict = LcbRunner(options).run(problem, "a, b = map(int, input().split())\nprint(a + b)\n");
    EXPECT_TRUE(verdict.passed) << python << ": " << verdict.detail;
  }
}

}  // namespace
}  // namespace moeserve::eval

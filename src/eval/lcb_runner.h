// LiveCodeBench execution: a sample passes only if its program passes every test of its problem (public then
// private), as lcb_runner's codegen_metrics grades pass@1 at the commit MLPerf pins (@b1e7cab).
//
// Each sample runs in its own sandbox (sandbox.h) under python3 with lcb_harness.py, which executes the program
// the way lcb_runner does and reports each test's output; the expected outputs stay in the evaluator, which
// compares them as grade_stdio / grade_call_based do (lcb_grading.h).
// Timeouts: every test (and the compile) has the per-test wall-clock timeout inside the harness; the sandbox
// kills the whole sample at (timeout + 1) * tests + 5 seconds of wall clock or CPU time, lcb_runner's global
// timeout in check_correctness. MLPerf passes timeout = 60.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "eval/lcb_grading.h"
#include "eval/livecodebench.h"
#include "eval/sandbox.h"

namespace moeserve::eval {

struct LcbRunnerOptions {
  // An absolute path, run as the file it links to: a python outside the system directories has its
  // installation (the directory above its bin/) shown read-only in the sandbox; a venv's own packages are not.
  // pyenv's shims are scripts that need the user's home: name the interpreter itself.
  std::string python = "/usr/bin/python3";
  double timeout_seconds = 60;              // per test, MLPerf's setting
  uint64_t memory_bytes = 4ull << 30;       // RLIMIT_AS of the program
  int max_processes = 16;
  size_t workers = 0;  // samples run in parallel; 0: one per hardware thread
  SandboxOptions sandbox;
};

struct LcbVerdict {
  bool passed = false;
  int tests_passed = 0;
  int tests_total = 0;
  std::string detail;  // why it failed: the first failing test and what went wrong
  double seconds = 0;
};

struct LcbJob {
  const LcbProblem* problem = nullptr;
  std::string code;
};

class LcbRunner {
 public:
  explicit LcbRunner(LcbRunnerOptions options = {});

  Isolation isolation() const { return sandbox_.isolation(); }
  const Sandbox& sandbox() const { return sandbox_; }

  LcbVerdict run(const LcbProblem& problem, const std::string& code) const;
  // Runs the jobs on up to `workers` threads at a time; verdicts in job order.
  std::vector<LcbVerdict> run_all(const std::vector<LcbJob>& jobs) const;

 private:
  LcbRunnerOptions options_;
  Sandbox sandbox_;
};

// The harness source, embedded at build time from lcb_harness.py.
extern const char* const kLcbHarnessSource;

}  // namespace moeserve::eval

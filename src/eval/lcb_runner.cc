#include "eval/lcb_runner.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <thread>

#include "util/error.h"

namespace moeserve::eval {
namespace {

// The options with python made canonical (the sandbox's root shows the file, not the links to it) and, when
// it lies outside the system directories (e.g. a build under /opt), its installation shown read-only: the
// directory above its bin/, where Python looks for its standard library (or its own directory otherwise).
LcbRunnerOptions with_python_shown(LcbRunnerOptions options) {
  MOESERVE_CHECK(options.python.starts_with("/"), "LiveCodeBench: python must be an absolute path, not {}",
                 options.python);
  std::error_code error;
  const std::filesystem::path python = std::filesystem::canonical(options.python, error);
  MOESERVE_CHECK(!error, "LiveCodeBench: python {}: {}", options.python, error.message());
  options.python = python.string();
  if (!is_sandbox_system_path(options.python)) {
    const std::filesystem::path directory = python.parent_path();
    options.sandbox.read_only_paths.push_back(
        (directory.filename() == "bin" ? directory.parent_path() : directory).string());
  }
  return options;
}

}  // namespace

LcbRunner::LcbRunner(LcbRunnerOptions options)
    : options_(with_python_shown(std::move(options))), sandbox_(options_.sandbox) {
  MOESERVE_CHECK(options_.timeout_seconds > 0, "LiveCodeBench: the per-test timeout must be positive");
}

LcbVerdict LcbRunner::run(const LcbProblem& problem, const std::string& code) const {
  LcbVerdict verdict;
  const std::vector<LcbTest> tests = problem.all_tests();
  verdict.tests_total = static_cast<int>(tests.size());
  if (tests.empty()) {
    verdict.detail = "the problem has no tests";
    return verdict;
  }
  const bool call_based = problem.func_name.has_value();
  if (call_based) {
    for (size_t i = 0; i < tests.size(); ++i) {
      if (!lcb_json_is_readable(tests[i].output)) {  // lcb_runner fails a test whose output is not JSON too
        verdict.detail = fmt::format("test {}: the expected output is not JSON nested at most {} deep", i,
                                     kLcbMaxJsonDepth);
        return verdict;
      }
    }
  }
  nlohmann::json spec = {{"mode", call_based ? "call" : "stdio"}, {"timeout", options_.timeout_seconds}};
  if (call_based) spec["fn_name"] = *problem.func_name;
  spec["inputs"] = nlohmann::json::array();
  for (const LcbTest& t : tests) spec["inputs"].push_back(t.input);

  SandboxRequest request;
  request.argv = {options_.python, "-I", "../harness.py", "../spec.json", "../solution.py"};
  request.files = {{"harness.py", kLcbHarnessSource}, {"spec.json", spec.dump()}, {"solution.py", code}};
  const double budget = (options_.timeout_seconds + 1) * static_cast<double>(tests.size()) + 5;
  request.limits.wall_seconds = budget;
  request.limits.cpu_seconds = budget;
  request.limits.memory_bytes = options_.memory_bytes;
  request.limits.max_processes = options_.max_processes;

  LcbReport report(tests, call_based);
  const SandboxResult result = sandbox_.run(request, [&](std::string_view line) { return report.take(line); });
  verdict.seconds = result.wall_seconds;
  verdict.tests_passed = report.tests_passed();
  verdict.detail = report.detail();
  verdict.passed = verdict.tests_passed == verdict.tests_total;
  if (!verdict.passed && verdict.detail.empty()) {
    switch (result.end) {
      case SandboxResult::End::timed_out:
        verdict.detail = fmt::format("killed at the global time limit ({:.0f} s)", budget);
        break;
      case SandboxResult::End::signaled:
        verdict.detail = fmt::format("killed by signal {}", result.signal);
        break;
      case SandboxResult::End::failed_to_start:
        verdict.detail = fmt::format("sandbox: {}", result.setup_error);
        break;
      default:
        verdict.detail = fmt::format("the harness ended ({}, exit code {}) after {} of {} tests: {}",
                                     end_name(result.end), result.exit_code, verdict.tests_passed,
                                     verdict.tests_total, lcb_shorten(result.stderr_text, 500));
    }
  }
  return verdict;
}

std::vector<LcbVerdict> LcbRunner::run_all(const std::vector<LcbJob>& jobs) const {
  std::vector<LcbVerdict> verdicts(jobs.size());
  const size_t workers = std::min(
      jobs.size(), options_.workers > 0 ? options_.workers : std::max<size_t>(1, std::thread::hardware_concurrency()));
  std::atomic<size_t> next{0};
  std::vector<std::exception_ptr> errors(workers);
  std::vector<std::thread> threads;
  for (size_t w = 0; w < workers; ++w) {
    threads.emplace_back([&, w] {
      try {
        for (size_t i; (i = next.fetch_add(1)) < jobs.size();) {
          MOESERVE_CHECK(jobs[i].problem != nullptr, "LiveCodeBench job {} has no problem", i);
          verdicts[i] = run(*jobs[i].problem, jobs[i].code);
        }
      } catch (...) {
        errors[w] = std::current_exception();
        next = jobs.size();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  return verdicts;
}

}  // namespace moeserve::eval

#include "cli/exit_codes.h"

#include <fmt/core.h>

#include <CLI/CLI.hpp>

#include "util/error.h"

namespace moeserve::cli {

std::string exit_codes_help(const std::string& valid, const std::string& invalid) {
  return fmt::format("Exit codes: {} {}; {} {}; {} usage or setup error (bad flags or input, nothing to measure or "
                     "score, no server at --endpoint, a failed preflight request); {} interrupted (Ctrl-C or "
                     "SIGTERM).",
                     kExitValid, valid, kExitInvalid, invalid, kExitSetupError, kExitInterrupted);
}

void run_verdict_command(const std::function<int()>& body) {
  int code = kExitValid;
  try {
    code = body();
  } catch (const Error& e) {
    fmt::print(stderr, "moeserve: error: {}\n", e.what());
    code = kExitSetupError;
  }
  // CLI11 turns a RuntimeError into the exit code without printing anything.
  if (code != kExitValid) throw CLI::RuntimeError(code);
}

}  // namespace moeserve::cli

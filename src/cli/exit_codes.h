// Exit codes of the commands that give a verdict (bench, eval, comply), listed in their --help and the README:
// the run counts (VALID, TEST PASS), it does not (INVALID, TEST FAIL), the command could not run at all (a usage
// or setup error: exit 2, as Python's argparse and so MLPerf's harness scripts use), or it was stopped by SIGINT or
// SIGTERM (130, 128 + SIGINT, as a shell reports a Ctrl-C). A script can tell "the numbers are bad" from "nothing
// was measured".
#pragma once

#include <functional>
#include <string>

namespace moeserve::cli {

constexpr int kExitValid = 0;
constexpr int kExitInvalid = 1;
constexpr int kExitSetupError = 2;
constexpr int kExitInterrupted = 130;

// The --help footer of those commands; `valid` and `invalid` say what exits 0 and 1 mean for the command.
std::string exit_codes_help(const std::string& valid, const std::string& invalid);

// Runs a verdict command's body: the code it returns becomes the process's exit code; a moeserve::Error it throws
// is printed as "moeserve: error: ..." and exits kExitSetupError.
void run_verdict_command(const std::function<int()>& body);

}  // namespace moeserve::cli

// Helpers shared by the tests: temporary directories, tiny checkpoints made once per process, running the CLI.
#pragma once

#include <string>

#include "model/gpt_oss/make_tiny.h"

namespace moeserve::testing {

// A fresh directory under the system temp dir, removed at process exit.
std::string temp_dir(const std::string& label);

// The checkpoint for these options, written once per test process (keyed by the options).
std::string tiny_model(const TinyModelOptions& options = {});

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};
// Runs a shell command line and captures its output.
CommandResult run_command(const std::string& command_line);

}  // namespace moeserve::testing

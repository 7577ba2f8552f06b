// What every subcommand's flags share beyond CLI11: vLLM's names are the documented ones, and the names moeserve
// used before stay as hidden aliases that still work and say once on stderr which flag replaces them; an unknown
// flag gets the nearest known one as a suggestion ("did you mean --max-num-seqs?").
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace moeserve::cli {

// Prints "moeserve: warning: OLD is deprecated: use REPLACEMENT" the first time OLD is used in this process.
void warn_deprecated(const std::string& old_name, const std::string& replacement);

// A hidden option OLD whose value goes to `apply` after the deprecation warning; `replacement` says what to use
// instead (a flag, or a flag with a note on what changed).
template <typename T>
CLI::Option* add_deprecated_option(CLI::App* command, const std::string& old_name, const std::string& replacement,
                                   std::function<void(const T&)> apply) {
  return command
      ->add_option_function<T>(
          old_name,
          [old_name, replacement, apply](const T& value) {
            warn_deprecated(old_name, replacement);
            apply(value);
          },
          "deprecated: " + replacement)
      ->group("");
}
CLI::Option* add_deprecated_flag(CLI::App* command, const std::string& old_name, const std::string& replacement,
                                 std::function<void()> apply);

// Every long flag a command (with its option groups) documents.
std::vector<std::string> documented_flags(const CLI::App& command);
// The documented flag nearest to `unknown` by edit distance, when it is near enough to be a likely typo.
std::optional<std::string> nearest_flag(const std::string& unknown, const std::vector<std::string>& flags);
// For CLI11's "arguments were not expected" error: a "did you mean" line for each unknown flag that has a near
// one, in the innermost subcommand that was given.
std::vector<std::string> flag_suggestions(const CLI::App& app);

}  // namespace moeserve::cli

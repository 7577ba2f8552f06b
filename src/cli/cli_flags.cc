#include "cli/cli_flags.h"

#include <fmt/core.h>

#include <algorithm>
#include <mutex>
#include <set>

namespace moeserve::cli {

void warn_deprecated(const std::string& old_name, const std::string& replacement) {
  static std::mutex mutex;
  static std::set<std::string> warned;
  std::lock_guard lock(mutex);
  if (!warned.insert(old_name).second) return;
  fmt::print(stderr, "moeserve: warning: {} is deprecated: use {}\n", old_name, replacement);
}

CLI::Option* add_deprecated_flag(CLI::App* command, const std::string& old_name, const std::string& replacement,
                                 std::function<void()> apply) {
  return command
      ->add_flag_function(
          old_name,
          [old_name, replacement, apply](int64_t) {
            warn_deprecated(old_name, replacement);
            apply();
          },
          "deprecated: " + replacement)
      ->group("");
}

namespace {

void collect_flags(const CLI::App& command, std::vector<std::string>& out) {
  for (const CLI::Option* option : command.get_options()) {
    if (option->get_group().empty()) continue;  // hidden: a deprecated alias
    for (const std::string& name : option->get_lnames()) out.push_back("--" + name);
  }
  // Option groups are nameless subcommands of their command.
  for (const CLI::App* group : command.get_subcommands([](const CLI::App* a) { return a->get_name().empty(); }))
    collect_flags(*group, out);
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

}  // namespace

std::vector<std::string> documented_flags(const CLI::App& command) {
  std::vector<std::string> flags;
  collect_flags(command, flags);
  return flags;
}

std::optional<std::string> nearest_flag(const std::string& unknown, const std::vector<std::string>& flags) {
  const std::string name = unknown.substr(0, unknown.find('='));  // --flag=value
  std::optional<std::string> best;
  size_t best_distance = SIZE_MAX;
  for (const std::string& flag : flags) {
    const size_t d = edit_distance(name, flag);
    if (d < best_distance) {
      best_distance = d;
      best = flag;
    }
  }
  // A third of the name's letters (at least 2) may differ: typos and near names, not unrelated flags.
  const size_t bound = std::max<size_t>(2, (name.size() - std::min<size_t>(name.size(), 2)) / 3);
  if (!best || best_distance == 0 || best_distance > bound) return std::nullopt;
  return best;
}

std::vector<std::string> flag_suggestions(const CLI::App& app) {
  const CLI::App* command = &app;
  for (;;) {
    const auto given = command->get_subcommands();
    if (given.empty()) break;
    command = given.front();
  }
  std::vector<std::string> lines;
  const std::vector<std::string> flags = documented_flags(*command);
  for (const std::string& arg : command->remaining()) {
    if (arg.rfind("--", 0) != 0) continue;
    if (const auto near = nearest_flag(arg, flags))
      lines.push_back(fmt::format("{}: unknown flag {}; did you mean {}?",
                                  command == &app ? std::string("moeserve") : "moeserve " + command->get_name(), arg,
                                  *near));
  }
  return lines;
}

}  // namespace moeserve::cli

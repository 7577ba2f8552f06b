// moeserve bench compare A.json B.json ...: runs side by side with each metric's ratio to the first (compare.h);
// the table goes to stdout, the page to --output.
#include <fmt/core.h>

#include <filesystem>
#include <memory>

#include "bench/compare.h"
#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "util/error.h"
#include "util/files.h"

namespace moeserve::cli {

CLI::App* register_bench_compare(CLI::App& bench) {
  struct Args {
    std::vector<std::string> results;
    std::string output = "moeserve_compare.html";
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = bench.add_subcommand("compare", "two or more moeserve_result.json side by side, with ratios");
  cmd->add_option("results", args->results, "moeserve_result.json files (or the directories that hold them)")
      ->required()
      ->expected(2, -1);
  cmd->add_option("--output", args->output, "the HTML page")->capture_default_str();
  cmd->callback([args] {
    run_verdict_command([args] {
      std::vector<bench::ComparedRun> runs;
      for (const std::string& path : args->results) {
        const std::string file = std::filesystem::is_directory(path) ? path + "/moeserve_result.json" : path;
        // Results hold every sample: allow far more than a config file.
        nlohmann::json result = read_json_file(file, uint64_t{1} << 30);
        MOESERVE_CHECK(result.value("format", "") == "moeserve-bench-result/1",
                       "{} is not a moeserve bench result (no \"format\": \"moeserve-bench-result/1\")", file);
        runs.push_back({path, std::move(result)});
      }
      fmt::print("{}", bench::compare_text(runs));
      write_text_file(args->output, bench::compare_html(runs));
      fmt::print("page: {}\n", args->output);
      return kExitValid;
    });
  });
  return cmd;
}

}  // namespace moeserve::cli
